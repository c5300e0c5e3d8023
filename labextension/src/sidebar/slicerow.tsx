/**
 * One reservation in a GPU card: who holds it, how much it uses, and what can be done to it;
 * expanded, its history.
 */
import {
  closeIcon,
  copyIcon,
  kernelIcon,
  terminalIcon
} from '@jupyterlab/ui-components';
import * as React from 'react';

import { IHistoryPoint, ISlice } from '../store/api';
import { SliceBar, usedPerGPU } from './bars';
import { HistoryChart } from './chart';
import { Disclosure, HolderName, WarningMark, WatchedChip } from './chips';
import { useNoticeCountdown } from './countdown';
import {
  burstNoticeDetails,
  burstNoticeText,
  commandText,
  elasticOf,
  elasticSentence,
  elasticUsageText,
  formatBytes,
  formatPercent,
  formatSpan,
  formatUsage,
  holderLabel,
  idleNoticeDetails,
  idleNoticeText,
  idleText,
  shareSentence,
  stateText,
  usageNote
} from '../format/format';

/** What a row needs to draw its history. */
export interface IHistorySource {
  slice(sliceId: string): IHistoryPoint[];
  device(uuid: string): IHistoryPoint[];
  /** Now on the server's clock (seconds since the epoch). */
  now(): number;
}

/** What a row can ask the application to do. */
export interface ISliceActions {
  openNotebook(path: string): void;
  /**
   * The kernel's name as the row shows it: its kernelspec's display name, with the slice's size
   * when `%vgpu resize` changed it.
   */
  kernelDisplayName(slice: ISlice): string;
  shutdownKernel(slice: ISlice): void;
  releaseSlice(slice: ISlice): void;
  copySliceId(slice: ISlice): void;
  /** The owner's "Keep it" for an idle slice the server is about to reclaim. */
  keepSlice(slice: ISlice): void;
  /** Cancel the job elsewhere of a kernel shut down whose cancel is not confirmed (`ending`). */
  cancelJob?(slice: ISlice): void;
}

/**
 * The server's notice that it shuts this idle kernel down for someone who needs the room: a
 * countdown, why, and (for the owner) "Keep it". `received`: when the reply carrying the notice
 * arrived (ms, the browser's clock).
 */
export function IdleNoticeLine(props: {
  slice: ISlice;
  received: number;
  actions: ISliceActions;
}): JSX.Element | null {
  const { slice, received, actions } = props;
  const notice = slice.idle_notice ?? null;
  const { left, deadline } = useNoticeCountdown(notice, received);
  if (!notice) {
    return null;
  }
  const label = holderLabel(slice);
  return (
    // Not a live region: the countdown changes every second (the notification is the alert).
    <div
      className="jp-vgpu-SliceRow-idleNotice"
      role="group"
      aria-label={`Idle notice for ${label}`}
      title={idleNoticeDetails(slice, notice, deadline)}
    >
      <span className="jp-vgpu-SliceRow-idleText">
        {idleNoticeText(notice, left)}
      </span>
      {slice.yours !== false && (
        <button
          className="jp-Button jp-mod-minimal jp-mod-styled jp-vgpu-action-keep"
          title={`Keep the kernel of ${label}: it counts as activity, and the server does not shut it down now`}
          aria-label={`Keep ${label}`}
          onClick={() => actions.keepSlice(slice)}
        >
          Keep it
        </button>
      )}
    </div>
  );
}

/**
 * The server asks this elastic slice's burst back for someone who needs the memory: a countdown,
 * how much, for whom and what then happens; the tooltip says how freeing memory ends it. No
 * "Keep it": a burst cannot be kept. `received`: as `IdleNoticeLine`'s.
 */
export function BurstNoticeLine(props: {
  slice: ISlice;
  received: number;
}): JSX.Element | null {
  const { slice, received } = props;
  const notice = slice.burst_notice ?? null;
  const { left, deadline } = useNoticeCountdown(notice, received);
  if (!notice) {
    return null;
  }
  return (
    // Not a live region: the countdown changes every second (the notification is the alert).
    <div
      className="jp-vgpu-SliceRow-burstNotice"
      role="group"
      aria-label={`Burst notice for ${holderLabel(slice)}`}
      title={burstNoticeDetails(slice, notice, deadline)}
    >
      <span className="jp-vgpu-SliceRow-burstText">
        {burstNoticeText(slice, notice, left)}
      </span>
    </div>
  );
}

function Holder(props: { slice: ISlice; actions: ISliceActions }): JSX.Element {
  const { slice, actions } = props;
  const isKernel = slice.holder_kind === 'kernel';
  return (
    <HolderName
      label={holderLabel(slice)}
      path={isKernel ? slice.path : null}
      className="jp-vgpu-SliceRow-holder"
      title={isKernel ? undefined : commandText(slice)}
      openNotebook={actions.openNotebook}
    />
  );
}

function details(slice: ISlice): string {
  const elastic = elasticOf(slice);
  const lines = [
    `Slice ${slice.id}: ${slice.request_text}`,
    shareSentence(slice),
    `Enforcement: ${slice.tier}${slice.watched ? ', watched by the server' : ''}`,
    `Frameworks may allocate ${formatBytes(elastic ? slice.memory_burst_limit : slice.memory_limit)} per GPU` +
      ` (${formatBytes(slice.context_allowance)} is kept for the CUDA context)`
  ];
  if (elastic) {
    lines.splice(2, 0, elasticSentence(elastic));
  }
  const note = usageNote(slice);
  if (note) {
    lines.push(note);
  } else if (slice.usage_source === 'reported') {
    lines.push(
      'Usage reported by the kernel itself (NVML cannot see its processes).'
    );
  } else if (slice.usage_source === 'none') {
    lines.push('Usage unknown: neither NVML nor the kernel reports it.');
  }
  if (typeof slice.idle_seconds === 'number') {
    lines.push(
      `Idle for ${formatSpan(slice.idle_seconds)} (no cell run, no message from the kernel, no GPU use)`
    );
  }
  if (slice.pid) {
    lines.push(
      `pid ${slice.pid}${slice.owner ? `, owner ${slice.owner}` : ''}`
    );
  }
  for (const [name, fw] of Object.entries(slice.frameworks ?? {})) {
    lines.push(`${name}: ${fw.status}${fw.detail ? ` (${fw.detail})` : ''}`);
  }
  return lines.join('\n');
}

/** The kernel's name, and in its tooltip what its slice reserves (and that it was resized). */
function KernelName(props: { slice: ISlice; name: string }): JSX.Element {
  const { slice, name } = props;
  const started = slice.kernel_display_name;
  const resized = !!started && started !== name;
  const title = resized
    ? `${shareSentence(slice)}\nResized with %vgpu resize: its kernelspec, “${started}”, asks for another size.`
    : shareSentence(slice);
  return (
    <span
      className={`jp-vgpu-SliceRow-kernel${resized ? ' jp-vgpu-mod-resized' : ''}`}
      title={title}
    >
      {name}
    </span>
  );
}

/**
 * A row of the GPU card for one slice; its caret shows the slice's history. Hovering it (or its
 * part of the GPU's bar) highlights both: `highlighted`, `onHover`.
 */
export function SliceRow(props: {
  slice: ISlice;
  colour: number;
  actions: ISliceActions;
  history: IHistorySource;
  /** When the reply holding `slice` arrived (ms, the browser's clock); now by default. */
  received?: number;
  highlighted?: boolean;
  onHover?: (sliceId: string | null) => void;
}): JSX.Element {
  const { slice, colour, actions, history, onHover } = props;
  const received = props.received ?? Date.now();
  const idle = idleText(slice);
  const [expanded, setExpanded] = React.useState(false);
  const warning = stateText(slice);
  const elastic = elasticOf(slice);
  const label = holderLabel(slice);
  const detailsId = `jp-vgpu-slice-history-${slice.id}`;
  const isKernel = slice.holder_kind === 'kernel';
  const KindIcon = isKernel ? kernelIcon : terminalIcon;
  // Only this server's kernels can be shut down from here, and only your own commands released.
  const canAct = isKernel ? slice.running_here : slice.yours;
  // Why the use is unknown, under the row (the tooltip always has the server's note).
  const note = slice.state === 'unknown' ? usageNote(slice) : null;
  return (
    <li
      className={`jp-vgpu-SliceRow jp-vgpu-colour-${colour} jp-vgpu-mod-${slice.state}${props.highlighted ? ' jp-vgpu-mod-highlighted' : ''}`}
      data-slice-id={slice.id}
      data-kernel-id={slice.kernel_id ?? ''}
      title={details(slice)}
      onMouseEnter={() => onHover?.(slice.id)}
      onMouseLeave={() => onHover?.(null)}
      onFocus={() => onHover?.(slice.id)}
      onBlur={() => onHover?.(null)}
    >
      <span
        className={`jp-vgpu-SliceRow-dot jp-vgpu-colour-${colour}`}
        aria-hidden="true"
      />
      <div className="jp-vgpu-SliceRow-main">
        <div className="jp-vgpu-SliceRow-line">
          <Disclosure
            expanded={expanded}
            onToggle={() => setExpanded(!expanded)}
            controls={detailsId}
            label={`History of ${label}`}
          />
          <Holder slice={slice} actions={actions} />
          <span className="jp-vgpu-SliceRow-actions">
            <button
              className="jp-Button jp-mod-minimal jp-vgpu-action-copy"
              title={`Copy slice id ${slice.id}`}
              aria-label="Copy slice id"
              onClick={() => actions.copySliceId(slice)}
            >
              <copyIcon.react tag="span" elementSize="small" />
            </button>
            {canAct && (
              <button
                className={`jp-Button jp-mod-minimal ${isKernel ? 'jp-vgpu-action-shutdown' : 'jp-vgpu-action-release'}`}
                title={
                  isKernel ? 'Shut down this kernel' : 'Release this slice'
                }
                aria-label={isKernel ? 'Shut down kernel' : 'Release slice'}
                onClick={() =>
                  isKernel
                    ? actions.shutdownKernel(slice)
                    : actions.releaseSlice(slice)
                }
              >
                <closeIcon.react tag="span" elementSize="small" />
              </button>
            )}
          </span>
        </div>
        <div className="jp-vgpu-SliceRow-line jp-vgpu-SliceRow-sub">
          <KindIcon.react
            tag="span"
            elementSize="small"
            className="jp-vgpu-SliceRow-kind"
          />
          {/* The kernel's name is cut before "idle 5 min" ever goes to a line of its own. */}
          <span className="jp-vgpu-SliceRow-kernelGroup">
            <KernelName
              slice={slice}
              name={
                isKernel
                  ? actions.kernelDisplayName(slice)
                  : `jupyter vgpu run, ${slice.request_text}`
              }
            />
            {idle && (
              <span
                className="jp-vgpu-SliceRow-idle"
                title="No cell run, no message from the kernel and no GPU use for this long"
              >
                {idle}
              </span>
            )}
          </span>
          <span className="jp-vgpu-SliceRow-enforcement">
            <span className="jp-vgpu-SliceRow-tier" title="Enforcement tier">
              {slice.tier}
            </span>
            {slice.watched && <WatchedChip />}
          </span>
        </div>
        {/* An elastic slice's bar gets a line of its own: its figure is longer. */}
        <div
          className={`jp-vgpu-SliceRow-line jp-vgpu-SliceRow-usage${elastic ? ' jp-vgpu-mod-elastic' : ''}`}
        >
          <SliceBar slice={slice} colour={colour} />
          {/* Beside the figure it is about, so the name above keeps its room. */}
          <WarningMark warning={warning} />
          <span className="jp-vgpu-SliceRow-memory">
            {elastic
              ? elasticUsageText(elastic)
              : formatUsage(usedPerGPU(slice), slice.memory_reserved)}
          </span>
          <span className="jp-vgpu-SliceRow-util" title="GPU utilisation">
            {formatPercent(slice.utilization)}
          </span>
        </div>
        {note && <p className="jp-vgpu-SliceRow-note">{note}</p>}
        {/* Bursts are given back before idle kernels are reclaimed: the burst's comes first. */}
        <BurstNoticeLine slice={slice} received={received} />
        <IdleNoticeLine slice={slice} received={received} actions={actions} />
        {expanded && (
          <div className="jp-vgpu-SliceRow-details" id={detailsId}>
            <HistoryChart
              points={history.slice(slice.id)}
              reserved={
                slice.memory_reserved_total ??
                (slice.memory_reserved ?? 0) * Math.max(1, slice.gpus.length)
              }
              now={history.now()}
              colourClass={`jp-vgpu-colour-${colour}`}
              subject={label}
              current={{ used: slice.memory_used, util: slice.utilization }}
            />
            <p className="jp-vgpu-SliceRow-share">{shareSentence(slice)}</p>
          </div>
        )}
      </div>
    </li>
  );
}
