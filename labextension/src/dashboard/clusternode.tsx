/**
 * One node of the cluster section ("Where there is room now"): its name, GPUs, a bar of its memory
 * with one part per GPU (booked pale, used solid, free empty), its figures and line, when it was
 * seen; a stale node marked, with the server's sentence, its last figures kept.
 */
import * as React from 'react';

import { clockTime } from '../charts/scales';
import {
  formatBytes,
  formatUsage,
  gpuCountText,
  gpuFiguresText,
  gpuModelText,
  nodeTotals,
  roomOnOneGPU,
  seenText,
  share,
  waitingText,
  yoursText
} from '../format/format';
import type { IClusterGPU, IClusterNode } from '../store/clustertypes';

/** Said of a stale node the server gave no sentence for. */
const STALE_FALLBACK =
  'Its exporter has not reported lately; these are the last figures it reported.';

function percent(fraction: number): string {
  return `${(fraction * 100).toFixed(3)}%`;
}

/** One GPU's part of a node's bar: booked pale, used solid, free empty. */
function GPUCell(props: { gpu: IClusterGPU; weight: number }): JSX.Element {
  const { gpu } = props;
  const known = typeof gpu.total === 'number' && gpu.total > 0;
  return (
    <div
      className={`jp-vgpu-ClusterBar-gpu${known ? '' : ' jp-vgpu-mod-unknown'}`}
      style={{ flexGrow: props.weight }}
      title={gpuFiguresText(gpu)}
      data-gpu-index={gpu.index}
    >
      {known && (
        <>
          <div
            className="jp-vgpu-ClusterBar-booked"
            style={{ width: percent(share(gpu.booked, gpu.total)) }}
          />
          <div
            className="jp-vgpu-ClusterBar-used"
            style={{ width: percent(share(gpu.used, gpu.total)) }}
          />
        </>
      )}
    </div>
  );
}

/** A node's memory, GPU by GPU (each as wide as its memory). */
function NodeBar(props: { node: IClusterNode }): JSX.Element {
  const gpus = props.node.gpus ?? [];
  const totals = gpus.map(g =>
    typeof g.total === 'number' && g.total > 0 ? g.total : null
  );
  const known = totals.filter((t): t is number => t !== null);
  // A GPU of unknown size is drawn as wide as the average known one (or all alike).
  const average = known.length
    ? known.reduce((a, b) => a + b, 0) / known.length
    : 1;
  const label = gpus.length
    ? gpus.map(gpuFiguresText).join('; ')
    : 'No GPU figures read';
  return (
    <div className="jp-vgpu-ClusterBar" role="img" aria-label={label}>
      {gpus.map((gpu, i) => (
        <GPUCell
          key={gpu.uuid || i}
          gpu={gpu}
          weight={(totals[i] ?? average) / average}
        />
      ))}
    </div>
  );
}

/** A figure of a node's card: its name, its value ("–" when unknown). */
function Figure(props: {
  name: string;
  label: string;
  value: string;
  title?: string;
}): JSX.Element {
  return (
    <span
      className="jp-vgpu-ClusterNode-figure"
      data-figure={props.name}
      title={props.title}
    >
      {props.label}{' '}
      <span className="jp-vgpu-ClusterNode-value">{props.value}</span>
    </span>
  );
}

export interface INodeCardProps {
  node: IClusterNode;
  /** When the cluster was read (the server's clock): "seen 3 s ago" counts from it. */
  readAt: number;
  /** How many of your slices it holds. */
  yours: number;
  selected: boolean;
  onSelect: (hostname: string) => void;
}

/** One node: its name, GPUs, bar, figures and line; stale ones marked, with the server's sentence. */
export function NodeCard(props: INodeCardProps): JSX.Element {
  const { node, yours, selected } = props;
  const totals = nodeTotals(node);
  const classes = [
    'jp-vgpu-ClusterNode',
    node.stale ? 'jp-vgpu-mod-stale' : '',
    yours > 0 ? 'jp-vgpu-mod-yours' : '',
    selected ? 'jp-mod-selected' : ''
  ].filter(Boolean);
  const figuresAt =
    node.stale && typeof node.figures_at === 'number'
      ? `Figures as read at ${clockTime(node.figures_at, true)}`
      : undefined;
  return (
    <li
      className={classes.join(' ')}
      data-hostname={node.hostname}
      data-stale={String(node.stale)}
      data-yours={yours}
    >
      <div className="jp-vgpu-ClusterNode-head">
        <button
          className="jp-vgpu-ClusterNode-name jp-vgpu-mod-link"
          aria-pressed={selected}
          title={
            selected
              ? `Hide ${node.hostname}'s memory over time`
              : `Show ${node.hostname}'s memory over the last hour`
          }
          onClick={() => props.onSelect(node.hostname)}
        >
          {node.hostname}
        </button>
        <span className="jp-vgpu-ClusterNode-model" title={gpuCountText(node)}>
          {gpuModelText(node)}
        </span>
        {node.stale && (
          <span
            className="jp-vgpu-Chip jp-vgpu-mod-stale"
            title={node.problem ?? STALE_FALLBACK}
          >
            stale
          </span>
        )}
        {yours > 0 && (
          <span
            className="jp-vgpu-Chip jp-vgpu-mod-yours"
            title={`${node.hostname} holds ${yours === 1 ? 'one of your slices' : `${yours} of your slices`} (below)`}
          >
            {yoursText(yours)}
          </span>
        )}
        <span className="jp-vgpu-ClusterNode-seen" title={figuresAt}>
          {seenText(node, props.readAt)}
        </span>
      </div>
      <NodeBar node={node} />
      <div className="jp-vgpu-ClusterNode-figures">
        <Figure
          name="booked"
          label="booked"
          value={formatUsage(totals.booked, totals.total)}
          title="What every user's slices book, of the node's GPU memory"
        />
        <Figure name="used" label="used" value={formatBytes(totals.used)} />
        <Figure
          name="free"
          label="free"
          value={formatBytes(totals.free)}
          title="What new slices could get on all its GPUs together"
        />
        <Figure
          name="room"
          label="room on one GPU"
          value={formatBytes(roomOnOneGPU(node))}
          title="The largest slice one GPU of the node could give now"
        />
        <Figure
          name="line"
          label="line"
          value={waitingText(node)}
          title="Every user's requests waiting for a slice on this node, and the memory they ask for"
        />
      </div>
      {node.stale && (
        <p className="jp-vgpu-ClusterNode-problem" role="note">
          {node.problem ?? STALE_FALLBACK}
        </p>
      )}
    </li>
  );
}
