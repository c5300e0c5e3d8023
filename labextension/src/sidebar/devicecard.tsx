/**
 * One GPU: its memory bar stacked by slice, utilisation, and a row per slice on it; expanded,
 * its history.
 */
import * as React from 'react';

import { IDevice, ISlice } from '../store/api';
import { DeviceBar, Sparkline } from './bars';
import { HistoryChart } from './chart';
import { Disclosure, WatchedChip } from './chips';
import {
  burstsHeldText,
  burstsOn,
  formatBytes,
  formatPercent,
  formatUsage,
  IBurstsHeld,
  overbookedText
} from '../format/format';
import { IHistorySource, ISliceActions, SliceRow } from './slicerow';

/** Why a GPU's total is not the card's: the share a Kubernetes scheduler gave this pod, or
 * the shards of a Slurm job. */
export function podShareTitle(device: IDevice): string {
  const lines = [
    device.slurm_job
      ? `This server runs in Slurm job ${device.slurm_job}: ${formatBytes(device.memory_total)} is the job's share of the GPU, and slices are fractions of it.`
      : `This server runs in a pod that a scheduler placed on a shared GPU: ${formatBytes(device.memory_total)} is the pod's share, and slices are fractions of it.`
  ];
  if (typeof device.card_memory === 'number') {
    lines.push(`The card itself has ${formatBytes(device.card_memory)}.`);
  }
  if (typeof device.sm_limit === 'number') {
    lines.push(`The pod may use ${device.sm_limit}% of the card's SMs.`);
  }
  return lines.join('\n');
}

/** What "free to reserve" means: not what NVML calls free. */
export const FREE_TITLE =
  'What a new slice can still reserve on this GPU now: its memory less what slices reserve, ' +
  'what they use beyond that, and what processes without a slice use. Memory reserved but ' +
  'not in use is not free: its slice may use it at any time.';

/**
 * "Free to reserve" on a GPU where elastic slices burst: the server counts their bursts as used
 * beyond reservations (`memory_over_use`), so they are not free either; a kernel's comes back
 * when a request waits for it.
 */
export function freeTitle(held: IBurstsHeld): string {
  const lines = burstsHeldText(held);
  return lines.length
    ? `${FREE_TITLE}\nNot free either: ${lines.join('; ')}.`
    : FREE_TITLE;
}

export function DeviceCard(props: {
  device: IDevice;
  slices: ISlice[];
  colour: (sliceId: string) => number;
  actions: ISliceActions;
  history: IHistorySource;
  /** When the reply holding `slices` arrived (ms, the browser's clock). */
  received?: number;
}): JSX.Element {
  const { device, slices, colour, actions, history, received } = props;
  const [expanded, setExpanded] = React.useState(false);
  // The slice under the pointer: its part of the bar and its row light up together.
  const [hovered, setHovered] = React.useState<string | null>(null);
  const points = history.device(device.uuid);
  const utilization = points.map(p => p.util);
  const detailsId = `jp-vgpu-gpu-history-${device.index}`;
  // Bursts are part of the server's over-use (not free): said apart, never added to it again.
  const bursts = burstsOn(slices, device.uuid);
  const burstLines = burstsHeldText(bursts);
  const overfull = overbookedText(device.memory_overbooked);
  const used =
    device.memory_used ??
    device.memory_foreign +
      slices.reduce((sum, s) => sum + (s.memory_used ?? 0), 0);
  return (
    <section
      className="jp-vgpu-DeviceCard"
      data-gpu-index={device.index}
      aria-label={`GPU ${device.index}`}
    >
      <header className="jp-vgpu-DeviceCard-header">
        <div className="jp-vgpu-DeviceCard-title">
          <Disclosure
            expanded={expanded}
            onToggle={() => setExpanded(!expanded)}
            controls={detailsId}
            label={`History of GPU ${device.index}`}
          />
          <span className="jp-vgpu-DeviceCard-index">GPU {device.index}</span>
          <span className="jp-vgpu-DeviceCard-chips">
            {device.mig_mode && <span className="jp-vgpu-Chip">MIG</span>}
            {device.watched && <WatchedChip what="the slices on this GPU" />}
          </span>
        </div>
        {/* On a line of its own, wrapped when the panel is narrow: never cut. */}
        <div
          className="jp-vgpu-DeviceCard-name"
          title={`${device.name}\n${device.uuid}\nEnforcement available: ${device.tier}`}
        >
          {device.name}
        </div>
        {(device.share || device.pod_share) && (
          <div
            className="jp-vgpu-DeviceCard-podShare"
            title={podShareTitle(device)}
          >
            {device.share || device.pod_share}
          </div>
        )}
      </header>
      <DeviceBar
        device={device}
        slices={slices}
        colour={colour}
        highlighted={hovered}
        onHover={setHovered}
      />
      <div className="jp-vgpu-DeviceCard-stats">
        <span
          className="jp-vgpu-DeviceCard-memory"
          title="Memory used by all processes / total"
        >
          {formatUsage(used, device.memory_total)}
        </span>
        <span className="jp-vgpu-DeviceCard-free" title={freeTitle(bursts)}>
          {formatBytes(device.memory_free)} free to reserve
        </span>
        {burstLines.length > 0 && (
          <span
            className="jp-vgpu-DeviceCard-burst"
            title={`${burstLines.join('.\n')}.`}
          >
            <span
              className="jp-vgpu-Legend-swatch jp-vgpu-mod-burst"
              aria-hidden="true"
            />
            {formatBytes(bursts.kernels + bursts.commands)} burst
          </span>
        )}
        <span className="jp-vgpu-DeviceCard-util" title="GPU utilisation">
          util {formatPercent(device.utilization)}
        </span>
        <Sparkline values={utilization} title="Utilisation history" />
      </div>
      {overfull && (
        <div
          className="jp-vgpu-DeviceCard-overfull"
          role="status"
          title="Processes on this GPU hold more memory than it has: requests booked memory that bursts grew into. The last to allocate may meet an out-of-memory error until the bursts are given back."
        >
          {overfull}
        </div>
      )}
      {expanded && (
        <div className="jp-vgpu-DeviceCard-details" id={detailsId}>
          <HistoryChart
            points={points}
            reserved={device.memory_reserved || null}
            total={device.memory_total}
            now={history.now()}
            subject={`GPU ${device.index}`}
            current={{ used, util: device.utilization }}
          />
        </div>
      )}
      {slices.length > 0 || device.memory_foreign > 0 ? (
        <ul className="jp-vgpu-DeviceCard-slices">
          {slices.map(slice => (
            <SliceRow
              key={slice.id}
              slice={slice}
              colour={colour(slice.id)}
              actions={actions}
              history={history}
              received={received}
              highlighted={hovered === slice.id}
              onHover={setHovered}
            />
          ))}
          {device.memory_foreign > 0 && (
            <li className="jp-vgpu-ForeignRow">
              <span
                className="jp-vgpu-SliceRow-dot jp-vgpu-mod-foreign"
                aria-hidden="true"
              />
              <span className="jp-vgpu-ForeignRow-label">
                other processes (no slice)
              </span>
              <span className="jp-vgpu-ForeignRow-memory">
                {formatBytes(device.memory_foreign)}
              </span>
            </li>
          )}
        </ul>
      ) : (
        <p className="jp-vgpu-DeviceCard-empty">No slices on this GPU.</p>
      )}
    </section>
  );
}
