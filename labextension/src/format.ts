/**
 * How sizes, shares and holders read in the sidebar and the status bar.
 */
import { PathExt } from '@jupyterlab/coreutils';

import {
  HolderKind,
  IGateway,
  IHostUsage,
  IIdleNotice,
  IMachineUsage,
  ISlice,
  ISlurmJobFields,
  IWaiting
} from './api';
import vocabulary from './vocabulary.json';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** What the server says of one enforcement tier (`jupyter_vgpu.vocabulary`, per tier). */
export interface ITierWords {
  /** How every view names the tier: "cooperative", "hard (MPS)", "hard (MIG device)". */
  text: string;
  /** Whether the hardware holds a slice's processes to their share. */
  hard: boolean;
  /** What a slice of this tier reserves, its share of the SMs not known. */
  share_note: string;
  /** What a 1/4 slice of this tier reserves. */
  share_note_quarter: string;
}

/**
 * The words the server and this extension share (`src/vocabulary.json`, written by
 * `python -m jupyter_vgpu.vocabulary`; tests/ui/test_labextension_checks.py fails when it is stale).
 */
export const VOCABULARY: {
  tiers: { [kind: string]: ITierWords };
  hidden_holder: { [kind in HolderKind]: string };
  holder_kinds: string[];
  usage_sources: string[];
} = vocabulary;

/** The tier a slice of an unknown `tier_kind` reads as: no compute is shared out. */
const DEFAULT_TIER = 'cooperative';

/** The percentage `share_note_quarter` names: what a 1/4 slice gets of the SMs. */
const QUARTER_PERCENT = '25%';

/** How many digits `fixed` reads past the ones it keeps: all a double >= 1 has (at most 52). */
const EXACT_DIGITS = 60;

/**
 * `value.toFixed(digits)`, but an exact tie goes to the even digit, as Python's `f"{value:.1f}"`
 * rounds it: 1.25 reads "1.2" (toFixed says "1.3"), 2.5 reads "2", 3.5 reads "4".
 */
export function fixed(value: number, digits: number): string {
  const rounded = value.toFixed(digits);
  const exact = Math.abs(value).toFixed(digits + EXACT_DIGITS);
  const kept = exact.slice(0, -EXACT_DIGITS).replace(/\.$/, '');
  const tie = /^50*$/.test(exact.slice(-EXACT_DIGITS));
  if (tie && Number(kept[kept.length - 1]) % 2 === 0) {
    return `${value < 0 ? '-' : ''}${kept}`; // toFixed rounded up, away from the even digit
  }
  return rounded;
}

/**
 * "2.1 GiB", "512 MiB", "0 B"; "–" when unknown. The same rule as the server's
 * `jupyter_vgpu.units.format_bytes`, so a figure reads the same in the CLI, `%vgpu` and here.
 */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !isFinite(bytes)) {
    return '–';
  }
  const units: [string, number, number][] = [
    ['TiB', 1024 ** 4, 1],
    ['GiB', GiB, 1],
    ['MiB', MiB, 0],
    ['KiB', 1024, 0]
  ];
  for (const [unit, size, digits] of units) {
    if (Math.abs(bytes) >= size) {
      return `${fixed(bytes / size, digits)} ${unit}`;
    }
  }
  return `${fixed(bytes, 0)} B`;
}

/**
 * "2.1 / 4.0 GiB": both numbers in the unit of the larger one, so they compare at a glance
 * (rounded as `formatBytes` rounds).
 */
export function formatUsage(
  used: number | null | undefined,
  total: number | null | undefined
): string {
  const inGiB = (total ?? used ?? 0) >= GiB;
  const unit = inGiB ? GiB : MiB;
  const digits = inGiB ? 1 : 0;
  const show = (value: number | null | undefined) =>
    value === null || value === undefined || !isFinite(value)
      ? '–'
      : fixed(value / unit, digits);
  return `${show(used)} / ${show(total)} ${inGiB ? 'GiB' : 'MiB'}`;
}

/** "63%", or "–" when NVML cannot say. */
export function formatPercent(value: number | null | undefined): string {
  return value === null || value === undefined ? '–' : `${Math.round(value)}%`;
}

/** The memory one slice uses on one of its GPUs (the server sums over all of them). */
export function usedPerGPU(slice: ISlice): number | null {
  if (slice.memory_used === null || slice.memory_used === undefined) {
    return null;
  }
  return slice.memory_used / Math.max(1, slice.gpus.length);
}

/** A share in [0, 1] of `total`, clamped so bars never overflow. */
export function share(
  part: number | null | undefined,
  total: number | null | undefined
): number {
  if (!part || !total || part < 0) {
    return 0;
  }
  return Math.min(1, part / total);
}

/** The command line of a `jupyter vgpu run` holder, as one string. */
export function commandText(slice: ISlice): string {
  if (Array.isArray(slice.command)) {
    return slice.command.join(' ');
  }
  return slice.command ?? '';
}

/**
 * What a user calls the holder of a slice: the notebook's file name, the command, or the kernel.
 */
export function holderLabel(slice: ISlice): string {
  if (slice.holder_kind === 'command') {
    // "/opt/conda/bin/python train.py" reads as "python train.py"; the tooltip has it all.
    return commandLabel(commandText(slice)) || `slice ${slice.id}`;
  }
  if (slice.path) {
    return PathExt.basename(slice.path);
  }
  return slice.kernel_id ? kernelLabel(slice.kernel_id) : `slice ${slice.id}`;
}

/**
 * "kernel 1a2b3c4d" for a kernel known by its id only; another user's kernel, whose id the
 * server withholds, as the server names it ("another user's kernel").
 */
export function kernelLabel(kernelId: string): string {
  return kernelId === VOCABULARY.hidden_holder.kernel
    ? kernelId
    : `kernel ${kernelId.slice(0, 8)}`;
}

/**
 * A command line as a user reads it: "/opt/conda/bin/python train.py" is "python train.py" (the
 * program's name, its arguments); another user's command as the server names it.
 */
export function commandLabel(text: string): string {
  if (text === VOCABULARY.hidden_holder.command) {
    return text;
  }
  const [program, ...args] = text.trim().split(/\s+/);
  return program ? [PathExt.basename(program), ...args].join(' ') : '';
}

/** What a user calls a waiting request: its notebook's name, the kernel, or the command. */
export function waiterLabel(w: IWaiting): string {
  if (w.holder_kind === 'kernel') {
    if (w.path) {
      return pathLabel(w.path);
    }
    const id = w.kernel_id ?? w.holder;
    return id ? kernelLabel(id) : `request ${w.ticket}`;
  }
  return commandLabel(w.holder ?? '') || `request ${w.ticket}`;
}

/** Words for the server's usage state. */
export function stateText(slice: ISlice): string | null {
  switch (slice.state) {
    case 'near':
      return 'Near its slice: the next allocation may fail.';
    case 'over':
      return 'Over its slice: it uses memory reserved for others.';
    default:
      return null;
  }
}

/**
 * The share of the SMs an MPS client gets for a slice of `fraction`: its percentage, rounded
 * up, 1 to 100. The server's rule (`jupyter_vgpu.enforcement.thread_percentage`), which first
 * rounds to 6 decimals so that 0.07 * 100 = 7.000000000000001 reads as 7, not 8.
 */
export function threadPercentage(fraction: number): number {
  return Math.max(
    1,
    Math.min(100, Math.ceil(Number((fraction * 100).toFixed(6))))
  );
}

/**
 * What a slice of tier `kind` reserves, in the server's words (its tier's `share_note`), with
 * its share of the SMs when the tier shares them out and `fraction` is known.
 */
export function tierShareNote(
  kind: string | null | undefined,
  fraction?: number | null
): string {
  const tier =
    (kind ? VOCABULARY.tiers[kind] : undefined) ??
    VOCABULARY.tiers[DEFAULT_TIER];
  if (
    fraction &&
    isFinite(fraction) &&
    tier.share_note_quarter !== tier.share_note &&
    tier.share_note_quarter.includes(QUARTER_PERCENT)
  ) {
    // The server names a known share in the note: "25%" for a quarter, so the rest follows.
    return tier.share_note_quarter.replace(
      QUARTER_PERCENT,
      `${threadPercentage(fraction)}%`
    );
  }
  return tier.share_note;
}

/**
 * What a slice's share reserves, in words: the server's `share_note` when it sends one, else
 * the server's words for the tier the slice was placed on (only MPS and MIG share out compute).
 */
export function shareNote(slice: ISlice): string {
  if (slice.share_note) {
    return slice.share_note;
  }
  return tierShareNote(slice.tier_kind, slice.fraction);
}

/** "1/4 GPU reserves memory only; compute is shared with the GPU's other users." */
export function shareSentence(slice: ISlice): string {
  return `${slice.request_text} reserves ${shareNote(slice)}.`;
}

/** "42 s", "3 min 5 s", "1 h 2 min": how long something has waited. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '–';
  }
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    const rest = s % 60;
    return `${Math.floor(s / 60)} min${rest ? ` ${rest} s` : ''}`;
  }
  const minutes = Math.floor((s % 3600) / 60);
  return `${Math.floor(s / 3600)} h${minutes ? ` ${minutes} min` : ''}`;
}

/**
 * "45 s", "1 min 31 s", "42 min", "3 h 5 min": how long (idle times), never more than it was:
 * each unit is cut, not rounded up (91 s reads "1 min 31 s", not "2 min"), and seconds are said
 * under 10 minutes. The server's rule (`jupyter_vgpu.units.format_duration`), so an idle time
 * reads the same in `jupyter vgpu status`, `%vgpu`, the server's messages and here.
 */
export function formatSpan(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '–';
  }
  const whole = Math.max(0, Math.floor(seconds));
  if (whole < 60) {
    return `${whole} s`;
  }
  const minutes = Math.floor(whole / 60);
  const rest = whole % 60;
  if (minutes < 10) {
    return rest ? `${minutes} min ${rest} s` : `${minutes} min`;
  }
  return minutes < 60
    ? `${minutes} min`
    : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** The shortest idle time a slice row shows: under a minute idle is not worth a word. */
export const IDLE_SHOWN_SECONDS = 60;

/** "idle 42 min": how long a slice's kernel has done nothing; null under a minute, or unknown. */
export function idleText(slice: ISlice): string | null {
  const idle = slice.idle_seconds;
  if (
    typeof idle !== 'number' ||
    !isFinite(idle) ||
    idle < IDLE_SHOWN_SECONDS
  ) {
    return null;
  }
  return `idle ${formatSpan(idle)}`;
}

/** "4:32", "0:05", "1:02:03": the time left on a countdown, whole seconds rounded up. */
export function formatCountdown(seconds: number | null | undefined): string {
  const s =
    seconds === null || seconds === undefined || !isFinite(seconds)
      ? 0
      : Math.max(0, Math.ceil(seconds - 1e-9));
  const two = (n: number) => String(n).padStart(2, '0');
  if (s >= 3600) {
    return `${Math.floor(s / 3600)}:${two(Math.floor((s % 3600) / 60))}:${two(s % 60)}`;
  }
  return `${Math.floor(s / 60)}:${two(s % 60)}`;
}

/** "14:32:05": a moment on the browser's clock (ms since the epoch), local time, 24 h. */
export function formatClock(ms: number): string {
  const d = new Date(ms);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

/**
 * Seconds left before an idle slice is reclaimed, `age` seconds after the reply that carried the
 * notice (never below 0).
 */
export function noticeSecondsLeft(notice: IIdleNotice, age: number): number {
  const left = Number(notice.seconds_left);
  return Math.max(0, (isFinite(left) ? left : 0) - Math.max(0, age));
}

/**
 * Why an idle slice is reclaimed, as the end of a sentence: "to free its GPU for 1 waiting in
 * line" (the server's `for` without its "(first: ...)", which the tooltips keep).
 */
export function idleReason(notice: IIdleNotice): string {
  const text = (notice.for ?? '').trim();
  const short = text.replace(/\s*\(first: .*\)$/, '');
  if (!short) {
    return 'to free its GPU';
  }
  // "1 waiting in line", "2 kernel starts refused in the last 10 min"; else the policy's words.
  return /^\d/.test(short)
    ? `to free its GPU for ${short}`
    : `to free its GPU (${short})`;
}

/** "Shutting down in 4:32 to free its GPU for 1 waiting in line": a slice row's warning. */
export function idleNoticeText(
  notice: IIdleNotice,
  secondsLeft: number
): string {
  const when = secondsLeft > 0 ? `in ${formatCountdown(secondsLeft)}` : 'now';
  return `Shutting down ${when} ${idleReason(notice)}`;
}

/** "idle for 42 min", or "idle" where the server did not say how long. */
function idleFor(slice: ISlice): string {
  return typeof slice.idle_seconds === 'number'
    ? `idle for ${formatSpan(slice.idle_seconds)}`
    : 'idle';
}

/**
 * The whole story of an idle notice, for tooltips: how long the kernel has been idle, who needs
 * the room, when it is shut down (`deadline`: on the browser's clock, ms) and how to keep it.
 */
export function idleNoticeDetails(
  slice: ISlice,
  notice: IIdleNotice,
  deadline: number
): string {
  const idle = idleFor(slice);
  const who = (notice.for ?? '').trim();
  return [
    `This kernel has been ${idle} (no cell run, no GPU use)${who ? ` while the GPU is needed: ${who}` : ''}.`,
    `The server shuts it down at ${formatClock(deadline)} to free its ${slice.request_text} slice; the notebook is kept.`,
    'Running a cell keeps it, and so does "Keep it".'
  ].join('\n');
}

/**
 * The notification for an idle notice: "train.ipynb's kernel, idle for 42 min, shuts down at
 * 14:32:05 to free its GPU for 1 waiting in line, unless you keep it or run a cell." JupyterLab
 * cuts a notification's text at 140 characters: what matters most comes first.
 */
export function idleNotificationText(
  slice: ISlice,
  notice: IIdleNotice,
  deadline: number
): string {
  const idle = `, ${idleFor(slice)},`;
  return `${holderLabel(slice)}'s kernel${idle} shuts down at ${formatClock(deadline)} ${idleReason(notice)}, unless you keep it or run a cell.`;
}

/** "GPU idle: shutting down in 4:32": the status bar item while its slice has an idle notice. */
export function statusIdleText(secondsLeft: number): string {
  return secondsLeft > 0
    ? `GPU idle: shutting down in ${formatCountdown(secondsLeft)}`
    : 'GPU idle: shutting down now';
}

/** A notebook path or a command as a user names it: the notebook's file name, or the command. */
export function pathLabel(path: string | null | undefined): string {
  if (!path) {
    return '';
  }
  return path.endsWith('.ipynb') ? PathExt.basename(path) : path;
}

/**
 * A slice's own bar, used against reserved, as three widths in percent of the bar: `used` (the
 * part of the reservation in use), `over` (use beyond the reservation) and `limit` (where the
 * reservation ends). While the slice stays within its reservation the bar is the reservation
 * (`limit` 100); over it, the bar grows to what is used and the reservation ends at `limit`.
 * Unknown or no use leaves the bar empty.
 */
export function usedOfReserved(
  used: number | null | undefined,
  reserved: number | null | undefined
): { used: number; over: number; limit: number } {
  if (!used || used <= 0 || !isFinite(used) || !reserved || !(reserved > 0)) {
    return { used: 0, over: 0, limit: 100 };
  }
  if (used <= reserved) {
    return { used: (used / reserved) * 100, over: 0, limit: 100 };
  }
  const limit = (reserved / used) * 100;
  return { used: limit, over: 100 - limit, limit };
}

/**
 * Why a slice's use is not known, or how it is measured, in a sentence: the server's
 * `usage_note`; without one (older servers), a sentence of ours while the use is unknown.
 */
export function usageNote(slice: ISlice): string | null {
  const note = slice.usage_note?.trim();
  if (note) {
    return note;
  }
  if (slice.state !== 'unknown') {
    return null;
  }
  const holder = slice.holder_kind === 'command' ? 'command' : 'kernel';
  return `No GPU process of this ${holder} seen yet, and it reports no use: its use shows once it allocates GPU memory.`;
}

/** "CPU 12 % · RAM 310 MiB of 23.4 GiB": a kernel's use of the host; null when nothing is known. */
export function formatHost(host: IHostUsage | null | undefined): string | null {
  if (!host) {
    return null;
  }
  const parts: string[] = [];
  const cpu = host.cpu_percent;
  if (typeof cpu === 'number' && isFinite(cpu)) {
    const cores =
      cpu > 100 && host.cpu_count ? ` of ${host.cpu_count} cores` : '';
    parts.push(`CPU ${Math.round(cpu)} %${cores}`);
  }
  const rss = host.memory_rss;
  if (typeof rss === 'number' && isFinite(rss)) {
    const total = host.memory_total;
    parts.push(
      `RAM ${formatBytes(rss)}${typeof total === 'number' && total > 0 ? ` of ${formatBytes(total)}` : ''}`
    );
  }
  return parts.length ? parts.join(' · ') : null;
}

/** "CPU 12% · RAM 310 MiB": a kernel's use of the host at a glance (the status bar); null: unknown. */
export function hostGlance(host: IHostUsage | null | undefined): string | null {
  if (!host) {
    return null;
  }
  const parts: string[] = [];
  if (typeof host.cpu_percent === 'number' && isFinite(host.cpu_percent)) {
    parts.push(`CPU ${Math.round(host.cpu_percent)}%`);
  }
  if (typeof host.memory_rss === 'number' && isFinite(host.memory_rss)) {
    parts.push(`RAM ${formatBytes(host.memory_rss)}`);
  }
  return parts.length ? parts.join(' · ') : null;
}

/** "CPU 23% of 16 cores · RAM 8.5 / 23.5 GiB": the machine as a whole (the sidebar's header). */
export function machineGlance(
  machine: IMachineUsage | null | undefined
): string | null {
  if (!machine) {
    return null;
  }
  const parts: string[] = [];
  const cores = machine.cpu_count ? ` of ${machine.cpu_count} cores` : '';
  if (
    typeof machine.cpu_percent === 'number' &&
    isFinite(machine.cpu_percent)
  ) {
    parts.push(`CPU ${Math.round(machine.cpu_percent)}%${cores}`);
  } else if (cores) {
    parts.push(`CPU –${cores}`); // the first reading has no figure yet
  }
  if (typeof machine.memory_used === 'number' && machine.memory_total) {
    parts.push(`RAM ${formatUsage(machine.memory_used, machine.memory_total)}`);
  }
  return parts.length ? parts.join(' · ') : null;
}

/** What the status bar item says of a kernel's slice: "GPU 2.1 / 4.0 GiB". */
export function statusText(slice: ISlice): string {
  if (isSlurmJob(slice)) {
    return slurmStatusText(slice);
  }
  return `GPU ${formatUsage(usedPerGPU(slice), slice.memory_reserved)}`;
}

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
function slurmStatusText(slice: ISlice): string {
  const job = slurmJobName(slice);
  const used = usedPerGPU(slice);
  if (slice.memory_reserved) {
    return `GPU ${formatUsage(used, slice.memory_reserved)} · ${job}`;
  }
  return used === null ? `GPU: ${job}` : `GPU ${formatBytes(used)} · ${job}`;
}

/** The status bar item's tooltip for a kernel running as a Slurm job. */
function slurmStatusTitle(slice: ISlice): string {
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

/** The words on simulated GPUs, wherever the UI says so. */
export const SIMULATED_NOTE =
  'The GPUs are simulated (JUPYTER_VGPU_SIMULATE): no real GPU is used.';

/**
 * The status bar item's tooltip: the GPU use and the slice, the kernel's use of the host beside
 * it, a warning, whether the GPUs are simulated.
 */
export function statusTitle(
  slice: ISlice,
  host: IHostUsage | null | undefined,
  simulated: boolean
): string {
  if (isSlurmJob(slice)) {
    return slurmStatusTitle(slice); // its GPUs are its node's: this server's say nothing of it
  }
  const lines = [
    `${statusText(slice)} used of reserved: ${slice.request_text}, slice ${slice.id} (${slice.tier})`
  ];
  const hostText = formatHost(host);
  if (hostText) {
    lines.push(hostText);
  }
  const note = usageNote(slice);
  if (note && !(simulated && /\bNVML\b/.test(note) && /^Measured/.test(note))) {
    lines.push(note); // an older server's "Measured by NVML" is not true of simulated GPUs
  }
  const warning = stateText(slice);
  if (warning) {
    lines.push(warning);
  }
  if (simulated) {
    lines.push(SIMULATED_NOTE);
  }
  lines.push('Click to show the GPUs panel.');
  return lines.join('\n');
}

/**
 * The GPU node a CPU-only server answers from (`--gateway-url`): "GPU node gpu01
 * (http://gpu01:8890/node)", or "GPU node <url>" when the node does not name itself.
 */
export function gatewayText(gateway: IGateway): string {
  return gateway.node
    ? `GPU node ${gateway.node} (${gateway.url})`
    : `GPU node ${gateway.url}`;
}
