/**
 * Kernels that run as Slurm jobs, in words.
 */
import { ISlice, ISlurmJobFields, IWaiting } from '../store/api';

import { pathLabel } from './holders';
import { formatBytes, formatUsage } from './units';
import { stateText, usageNote, usedPerGPU } from './usage';

/** Whether a row of the slices or of the line is a kernel running (or waiting) as a Slurm job. */
export function isSlurmJob(row: ISlurmJobFields): boolean {
  return typeof row.job_id === 'string' && row.job_id !== '';
}

/** "Slurm job 12 on node1", or "Slurm job 13" while Slurm has placed it nowhere. */
export function slurmJobName(row: ISlurmJobFields): string {
  const node =
    row.slurm_state === 'RUNNING' && row.node ? ` on ${row.node}` : '';
  return `Slurm job ${row.job_id}${node}`;
}

/**
 * ["Slurm job 12 on node1", "GPU 0", "8/32 shards (1/4 GPU)"]: where a kernel's job runs and what
 * it holds (the GPU is its node's, as Slurm numbers them there); a pending job has no node yet.
 */
export function slurmJobParts(
  row: ISlurmJobFields & { gpu_indices?: number[] }
): string[] {
  const parts = [slurmJobName(row)];
  const gpus = row.gpu_indices ?? [];
  if (gpus.length > 0) {
    parts.push(`${gpus.length > 1 ? 'GPUs' : 'GPU'} ${gpus.join(', ')}`);
  }
  if (row.share_text) {
    parts.push(row.share_text);
  }
  return parts;
}

/** "Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)" (`slurmJobParts`, in one line). */
export function slurmJobText(
  row: ISlurmJobFields & { gpu_indices?: number[] }
): string {
  return slurmJobParts(row).join(' · ');
}

/**
 * Why a pending job waits: Slurm's reason, and in words where the server knows them
 * ("Resources: no node has the GPU shards free now"); "no reason given yet" before Slurm says.
 */
export function slurmReasonText(row: ISlurmJobFields): string {
  const reason = row.slurm_reason;
  if (!reason) {
    return 'no reason given yet';
  }
  return row.slurm_reason_text ? `${reason}: ${row.slurm_reason_text}` : reason;
}

/** "place 1 in partition gpu's queue": a pending job's place among the partition's pending jobs. */
export function slurmPlaceText(w: IWaiting): string {
  if (!w.position) {
    return "its place in Slurm's queue is not known yet";
  }
  const queue = w.partition
    ? `partition ${w.partition}'s queue`
    : "Slurm's queue";
  return `place ${w.position} in ${queue}`;
}

/**
 * The status bar item of a kernel running as a Slurm job: "GPU 1.0 / 4.0 GiB · Slurm job 12 on
 * node1" once the kernel has said its use and budget, "GPU: Slurm job 12 on node1" before.
 */
export function slurmStatusText(slice: ISlice): string {
  const job = slurmJobName(slice);
  const used = usedPerGPU(slice);
  if (slice.memory_reserved) {
    return `GPU ${formatUsage(used, slice.memory_reserved)} · ${job}`;
  }
  return used === null ? `GPU: ${job}` : `GPU ${formatBytes(used)} · ${job}`;
}

/** The status bar item's tooltip for a kernel running as a Slurm job. */
export function slurmStatusTitle(slice: ISlice): string {
  const used = usedPerGPU(slice);
  const lines = [`${slurmJobText(slice)}.`];
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
  if (slice.slurm_ended) {
    lines.push(slice.slurm_ended);
  }
  lines.push('Click to show the GPUs panel.');
  return lines.join('\n');
}

/** "GPU: Slurm job 13 pending (Resources) · place 1": the status bar item while the job waits. */
export function slurmWaitingText(w: IWaiting): string {
  const reason = w.slurm_reason ? ` (${w.slurm_reason})` : '';
  const place = w.position ? ` · place ${w.position}` : '';
  return `GPU: Slurm job ${w.job_id} pending${reason}${place}`;
}

/** The whole story of a pending Slurm job, for tooltips: what it asks, why it waits, its place. */
export function slurmWaitingTitle(w: IWaiting, waited: string): string {
  const name = pathLabel(w.path) || 'This kernel';
  const asks = w.share_text ? ` for ${w.share_text}` : '';
  return [
    `${name} waits in Slurm's queue${asks}: job ${w.job_id} is pending.`,
    `Slurm's reason: ${slurmReasonText(w)}.`,
    `It is at ${slurmPlaceText(w)}, waiting ${waited}; it starts on the node Slurm places it on.`
  ].join('\n');
}
