/**
 * The cluster in words and in order (the dashboard's cluster section): a node's sums over its
 * GPUs, its room on one GPU, its line and when it was seen; the order that puts the room first
 * and stale nodes last; your slices by node. The rules of `jupyter vgpu status --cluster`
 * (jupyter_vgpu/cli/cluster.py), so every view agrees. A figure the server does not know is
 * null and reads "–", never 0.
 */
import { PathExt } from '@jupyterlab/coreutils';

import type {
  IClusterGPU,
  IClusterNode,
  IClusterSlice
} from '../store/clustertypes';
import { commandLabel } from './holders';
import { VOCABULARY } from './tiers';
import { formatBytes, formatSpan } from './units';

/** A node's memory summed over its GPUs (bytes). */
export interface INodeTotals {
  total: number | null;
  booked: number | null;
  used: number | null;
  free: number | null;
}

type Figure = 'total' | 'booked' | 'used' | 'free';

/** A known figure: a finite number. */
function known(value: number | null | undefined): value is number {
  return typeof value === 'number' && isFinite(value);
}

/**
 * A node's sums over its GPUs: null where any GPU's figure is unknown (a sum of what is known
 * would read as a smaller figure than the node's), or when no GPU was read.
 */
export function nodeTotals(node: IClusterNode): INodeTotals {
  const gpus = node.gpus ?? [];
  const sum = (name: Figure): number | null => {
    const values = gpus.map(g => g[name]);
    return values.length > 0 && values.every(known)
      ? (values as number[]).reduce((a, b) => a + b, 0)
      : null;
  };
  return {
    total: sum('total'),
    booked: sum('booked'),
    used: sum('used'),
    free: sum('free')
  };
}

/** The most a new slice could get on one GPU of the node: the most free of its GPUs known. */
export function roomOnOneGPU(node: IClusterNode): number | null {
  const frees = (node.gpus ?? []).map(g => g.free).filter(known);
  return frees.length > 0 ? Math.max(...frees) : null;
}

/**
 * The nodes in the order a user looks for room: fresh ones with the most room on one GPU first
 * (unknown room after every known one), then the stale ones, which are never dropped; a tie by
 * host name. Returns a new array.
 */
export function sortNodes(nodes: IClusterNode[]): IClusterNode[] {
  const rank = (n: IClusterNode) => roomOnOneGPU(n) ?? -1;
  return nodes.slice().sort((a, b) => {
    if (a.stale !== b.stale) {
      return a.stale ? 1 : -1;
    }
    if (!a.stale) {
      const room = rank(b) - rank(a);
      if (room !== 0) {
        return room;
      }
    }
    return a.hostname < b.hostname ? -1 : a.hostname > b.hostname ? 1 : 0;
  });
}

/** "2 × NVIDIA A100-SXM4-80GB"; "2 × A100, 1 × H100" when the GPUs differ; "no GPU read". */
export function gpuModelText(node: IClusterNode): string {
  const gpus = node.gpus ?? [];
  if (gpus.length === 0) {
    return 'no GPU read';
  }
  if (node.model) {
    return `${gpus.length} × ${node.model}`;
  }
  const counts = new Map<string, number>();
  for (const gpu of gpus) {
    const model = gpu.model || 'unknown model';
    counts.set(model, (counts.get(model) ?? 0) + 1);
  }
  return Array.from(counts, ([model, n]) => `${n} × ${model}`).join(', ');
}

/** "1 GPU", "8 GPUs". */
export function gpuCountText(node: IClusterNode): string {
  const n = (node.gpus ?? []).length;
  return n === 1 ? '1 GPU' : `${n} GPUs`;
}

/** The node's line: "none waiting", "2 waiting for 160.0 GiB", "–" when unknown. */
export function waitingText(node: IClusterNode): string {
  const { requests, memory } = node.waiting ?? {
    requests: null,
    memory: null
  };
  if (!known(requests)) {
    return '–';
  }
  if (requests === 0) {
    return 'none waiting';
  }
  return known(memory)
    ? `${requests} waiting for ${formatBytes(memory)}`
    : `${requests} waiting`;
}

/** "seen 3 s ago", as of `now` (the server's clock, the reply's `read_at`); "never seen". */
export function seenText(node: IClusterNode, now: number): string {
  if (!known(node.last_seen)) {
    return 'never seen';
  }
  return `seen ${formatSpan(Math.max(0, now - node.last_seen))} ago`;
}

/** One GPU's figures in words, for its part of the node's bar. */
export function gpuFiguresText(gpu: IClusterGPU): string {
  const model = gpu.model ? ` ${gpu.model}` : '';
  return (
    `GPU ${gpu.index}${model}: ${formatBytes(gpu.booked)} booked, ` +
    `${formatBytes(gpu.used)} used, ${formatBytes(gpu.free)} free of ${formatBytes(gpu.total)}`
  );
}

/** What a user calls a slice's holder: the notebook's file name, the command, or the slice. */
export function clusterHolderLabel(slice: IClusterSlice): string {
  const holder = (slice.holder ?? '').trim();
  if (!holder) {
    return `slice ${slice.id}`;
  }
  if (slice.kernel_id !== null) {
    return PathExt.basename(holder) || holder;
  }
  return commandLabel(holder) || holder;
}

/** Where a slice is on its node: "GPU 0", "GPUs 0, 1"; "GPU ?" where the index is not known. */
export function sliceGPUsText(slice: IClusterSlice): string {
  const indices = (slice.gpus ?? []).map(g =>
    g.index === null || g.index === undefined ? '?' : String(g.index)
  );
  return indices.length === 1
    ? `GPU ${indices[0]}`
    : `GPUs ${indices.join(', ')}`;
}

/** A slice's figure summed over its GPUs: null where any is unknown. */
export function sliceSum(
  slice: IClusterSlice,
  name: 'request' | 'used'
): number | null {
  const values = (slice.gpus ?? []).map(g => g[name]);
  return values.length > 0 && values.every(known)
    ? (values as number[]).reduce((a, b) => a + b, 0)
    : null;
}

/** How every view names a tier ("hard (MPS)"); the name itself for a tier this UI does not know. */
export function clusterTierText(tier: string): string {
  return VOCABULARY.tiers[tier]?.text ?? tier;
}

/** Your slices by the node that holds them, nodes in host name order. */
export function slicesByNode(
  slices: IClusterSlice[]
): [string, IClusterSlice[]][] {
  const groups = new Map<string, IClusterSlice[]>();
  for (const slice of slices ?? []) {
    const group = groups.get(slice.hostname) ?? [];
    group.push(slice);
    groups.set(slice.hostname, group);
  }
  return Array.from(groups).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** "your slice", "2 of your slices": a node that holds yours, in the node list. */
export function yoursText(count: number): string {
  return count === 1 ? 'your slice' : `${count} of your slices`;
}
