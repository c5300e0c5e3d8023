/**
 * Kernels that run elsewhere (a launcher's: a Slurm job on a node Slurm picks), in words: built
 * from the row's `elsewhere` (docs/rest.md, "Kernels that run elsewhere"), the launcher's words
 * shown as they come. Nothing here names a launcher.
 */
import { IElsewhere, ISlice, IWaiting } from '../store/api';

import { pathLabel } from './holders';
import { formatBytes, formatUsage } from './units';
import { stateText, usageNote, usedPerGPU } from './usage';

/** The row's `elsewhere` when its kernel runs elsewhere; null for this server's own. */
export function elsewhereOf(row: {
  elsewhere?: IElsewhere | null;
}): IElsewhere | null {
  return row.elsewhere ?? null;
}

/** Whether a row of the slices or of the line is a kernel that runs (or waits) elsewhere. */
export function isElsewhere(row: { elsewhere?: IElsewhere | null }): boolean {
  return elsewhereOf(row) !== null;
}

/**
 * The engine's own id of the kernel's job ("12"); until the server sends `ref`, the row's id
 * without its launcher's prefix ("slurm-12").
 */
export function elsewhereRef(e: IElsewhere): string {
  if (e.ref) {
    return e.ref;
  }
  const prefix = `${e.launcher}-`;
  return e.id.startsWith(prefix) ? e.id.slice(prefix.length) : e.id;
}

/** Who places the kernel ("Slurm"), for "Slurm's reason"; "the launcher" until the server says. */
export function elsewhereEngine(e: IElsewhere): string {
  return e.engine || 'the launcher';
}

/** The line it waits in, in words ("Slurm's queue"). */
export function elsewhereLine(e: IElsewhere): string {
  return e.line || `${elsewhereEngine(e)}'s line`;
}

/** "Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)": `where` in one line. */
export function elsewhereText(e: IElsewhere): string {
  return e.where.length > 0 ? e.where.join(' · ') : e.name;
}

/** What it asks or holds: the parts of `where` after its name ("8/32 shards (1/4 GPU)"). */
export function elsewhereHolds(e: IElsewhere): string {
  return e.where.slice(1).join(' · ');
}

/**
 * Why a pending one waits: the engine's reason, and in words where the server knows them
 * ("Resources: no node has the GPU shards free now"); "no reason given yet" before it says.
 */
export function elsewhereReasonText(e: IElsewhere): string {
  if (!e.reason) {
    return 'no reason given yet';
  }
  return e.reason_text ? `${e.reason}: ${e.reason_text}` : e.reason;
}

/** "place 1 in partition gpu's queue": where a pending one stands in its engine's line. */
export function elsewherePlaceText(
  e: IElsewhere,
  position?: number | null
): string {
  if (e.place_text) {
    return e.place_text;
  }
  return position
    ? `place ${position} in ${elsewhereLine(e)}`
    : `its place in ${elsewhereLine(e)} is not known yet`;
}

/**
 * The sentence shown under a row that is ending or runs unfenced; until the server sends
 * `notice`, an ending row's `note`.
 */
export function elsewhereNotice(e: IElsewhere): string | null {
  if (e.notice !== undefined) {
    return e.notice;
  }
  return e.state === 'ending' ? e.note : null;
}

/**
 * The status bar item of a kernel that runs elsewhere: "GPU 1.0 / 4.0 GiB · Slurm job 12 on
 * node1" once the kernel has said its use and budget, "GPU: Slurm job 12 on node1" before.
 */
export function elsewhereStatusText(slice: ISlice, e: IElsewhere): string {
  const used = usedPerGPU(slice);
  if (slice.memory_reserved) {
    return `GPU ${formatUsage(used, slice.memory_reserved)} · ${e.name}`;
  }
  return used === null
    ? `GPU: ${e.name}`
    : `GPU ${formatBytes(used)} · ${e.name}`;
}

/** What a kernel that runs elsewhere on simulated GPUs says of them (its row, its status bar item). */
export const ELSEWHERE_SIMULATED =
  'The GPUs where this kernel runs are simulated (JUPYTER_VGPU_SIMULATE there): no real hardware is used.';

/**
 * Whether the status bar item of `slice` says "simulated": a kernel that runs elsewhere as its
 * node's GPUs are (as it reports), any other as this server's are.
 */
export function statusSimulated(
  slice: ISlice,
  serverSimulated: boolean
): boolean {
  return slice.elsewhere ? !!slice.elsewhere.simulated : serverSimulated;
}

/** The status bar item's tooltip for a kernel that runs elsewhere. */
export function elsewhereStatusTitle(slice: ISlice, e: IElsewhere): string {
  const used = usedPerGPU(slice);
  const lines = [`${elsewhereText(e)}.`];
  if (used !== null) {
    lines.push(
      `${slice.memory_reserved ? `${formatUsage(used, slice.memory_reserved)} used of the job's share` : `${formatBytes(used)} used`}.`
    );
  }
  const note = usageNote(slice);
  if (note) {
    lines.push(note);
  }
  lines.push(`Enforcement: ${slice.tier}`);
  const warning = stateText(slice);
  if (warning) {
    lines.push(warning);
  }
  if (e.ended) {
    lines.push(e.ended);
  }
  if (e.simulated) {
    lines.push(ELSEWHERE_SIMULATED);
  }
  lines.push('Click to show the GPUs panel.');
  return lines.join('\n');
}

/** "GPU: Slurm job 13 pending (Resources) · place 1": the status bar item while it waits. */
export function elsewhereWaitingText(w: IWaiting, e: IElsewhere): string {
  const reason = e.reason ? ` (${e.reason})` : '';
  const place = w.position ? ` · place ${w.position}` : '';
  return `GPU: ${e.name} pending${reason}${place}`;
}

/** The whole story of a kernel waiting elsewhere, for tooltips: what it asks, why, its place. */
export function elsewhereWaitingTitle(
  w: IWaiting,
  e: IElsewhere,
  waited: string
): string {
  const name = pathLabel(w.path) || 'This kernel';
  const holds = elsewhereHolds(e);
  const asks = holds ? ` for ${holds}` : '';
  const engine = elsewhereEngine(e);
  return [
    `${name} waits in ${elsewhereLine(e)}${asks}: job ${elsewhereRef(e)} is pending.`,
    `${engine[0].toUpperCase()}${engine.slice(1)}'s reason: ${elsewhereReasonText(e)}.`,
    `It is at ${elsewherePlaceText(e, w.position)}, waiting ${waited}; it starts on the node ${engine} places it on.`
  ].join('\n');
}
