/**
 * The idle reclaim in words: a slice's idle time, the notice before a reclaim, its countdown.
 */
import { IIdleNotice, ISlice } from '../store/api';

import { holderLabel } from './holders';
import { formatClock, formatCountdown, formatSpan } from './units';

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

/**
 * Seconds left before an idle slice is reclaimed, `age` seconds after the reply that carried the
 * notice (never below 0).
 */
export function noticeSecondsLeft(notice: IIdleNotice, age: number): number {
  const left = Number(notice.seconds_left);
  return Math.max(0, (isFinite(left) ? left : 0) - Math.max(0, age));
}

/**
 * Who needs the room a notice (idle or burst) frees, without the details the tooltips keep:
 * "1 waiting in line" of the server's "1 waiting in line (first: train.ipynb, 1/2 GPU)".
 */
export function neededBy(notice: IIdleNotice): string {
  return (notice.for ?? '').trim().replace(/\s*\((first|#\d+): .*\)$/, '');
}

/**
 * Why an idle slice is reclaimed, as the end of a sentence: "to free its GPU for 1 waiting in
 * line" (the server's `for` without its "(first: ...)", which the tooltips keep).
 */
export function idleReason(notice: IIdleNotice): string {
  const short = neededBy(notice);
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
