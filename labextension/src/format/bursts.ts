/**
 * A burst given back (issue 42) in words: the notice while the server asks an elastic slice's
 * use above its request back for someone who needs the memory, its countdown, and the watchdog
 * event when the admin's action ran. Nothing keeps a burst: its owner ends the notice by freeing
 * memory, so unlike the idle notice's words these never offer "Keep it".
 */
import { IBurstDue, IBurstNotice, ISlice, IWatchdogEvent } from '../store/api';

import { holderLabel } from './holders';
import { neededBy } from './idle';
import { formatBytes, formatClock, formatCountdown } from './units';

/** The admin's `burst_reclaim_action`, as each view says it. */
interface IBurstActionWords {
  /** The end of the row's and the notification's sentence: ", or the kernel restarts". */
  or: string;
  /** The status bar's verb: "restarting" (in 0:42). */
  doing: string;
  /** The tooltip's sentence after "If it still does at 14:32:05, the server ...". */
  then: string;
  /** What failed, in a burst event: "but restarting it failed". */
  tried: string;
}

const ACTION_WORDS: { [action: string]: IBurstActionWords } = {
  restart: {
    or: ', or the kernel restarts',
    doing: 'restarting',
    then: 'restarts the kernel: it keeps its slice, back at its request, but its variables are lost.',
    tried: 'restarting it'
  },
  interrupt: {
    or: ', or its running cell is interrupted',
    doing: 'interrupting',
    then: 'interrupts its running cell.',
    tried: 'interrupting it'
  },
  shutdown: {
    or: ', or the kernel shuts down',
    doing: 'shutting down',
    then: 'shuts the kernel down; the notebook is kept.',
    tried: 'shutting it down'
  },
  warn: {
    or: " (the admin's policy only warns)",
    doing: 'give back',
    then: "only warns (the admin's policy): the kernel keeps running.",
    tried: 'warning it'
  }
};

function actionWords(action: string): IBurstActionWords {
  return (
    ACTION_WORDS[action] ?? {
      or: `, or the server acts (${action})`,
      doing: 'asked back',
      then: `applies the admin's burst reclaim (${action}).`,
      tried: `acting on it (${action})`
    }
  );
}

/**
 * What the slice is asked to give back, all its GPUs together (bytes): its burst now, or the
 * notice's while the server does not say (an older reply, a use not known).
 */
export function burstAskedBack(slice: ISlice, notice: IBurstNotice): number {
  const now = slice.memory_burst;
  return typeof now === 'number' && isFinite(now) && now > 0
    ? now
    : notice.burst;
}

/** For whom the burst is asked back: "for 1 waiting in line" (the tooltips keep "(first: ...)"). */
export function burstReason(notice: IBurstNotice): string {
  const short = neededBy(notice);
  if (!short) {
    return 'for someone who needs it';
  }
  // "1 waiting in line", "2 kernel starts refused in the last 10 min"; else the policy's words.
  return /^\d/.test(short) ? `for ${short}` : `(${short})`;
}

/**
 * "Give back 2.1 GiB in 0:42 for 1 waiting in line, or the kernel restarts": a slice row's
 * warning, counting down.
 */
export function burstNoticeText(
  slice: ISlice,
  notice: IBurstNotice,
  secondsLeft: number
): string {
  const when = secondsLeft > 0 ? `in ${formatCountdown(secondsLeft)}` : 'now';
  const bytes = formatBytes(burstAskedBack(slice, notice));
  return `Give back ${bytes} ${when} ${burstReason(notice)}${actionWords(notice.action).or}`;
}

/**
 * The whole story of a burst notice, for tooltips: how much above the request, for whom (the
 * server's `for`, which names only your own notebooks and commands), what happens when
 * (`deadline`: on the browser's clock, ms), and how freeing memory ends it.
 */
export function burstNoticeDetails(
  slice: ISlice,
  notice: IBurstNotice,
  deadline: number
): string {
  const request =
    slice.memory_reserved_total ??
    (slice.memory_reserved ?? 0) * Math.max(1, slice.gpus.length);
  const who = (notice.for ?? '').trim();
  const action = notice.action;
  return [
    `This kernel uses ${formatBytes(burstAskedBack(slice, notice))} above its ${formatBytes(request)} request${who ? ` while the GPU is needed: ${who}` : ''}.`,
    action === 'warn'
      ? `At ${formatClock(deadline)} the server ${actionWords(action).then}`
      : `If it still does at ${formatClock(deadline)}, the server ${actionWords(action).then}`,
    'Freeing GPU memory ends the notice: del what you no longer need, then gc.collect(); in PyTorch also torch.cuda.empty_cache().',
    'On a real GPU, TensorFlow and JAX cannot give memory back before a restart (simulated GPUs count what their tensors hold, so del frees it there).'
  ].join('\n');
}

/**
 * The notification for a burst notice: "burst.ipynb: give back 2.1 GiB of GPU memory by 14:32:05
 * for 1 waiting in line, or the kernel restarts." JupyterLab cuts a notification's text at 140
 * characters: what matters most comes first.
 */
export function burstNotificationText(
  slice: ISlice,
  notice: IBurstNotice,
  deadline: number
): string {
  const bytes = formatBytes(burstAskedBack(slice, notice));
  return `${holderLabel(slice)}: give back ${bytes} of GPU memory by ${formatClock(deadline)} ${burstReason(notice)}${actionWords(notice.action).or}.`;
}

/** "GPU burst: restarting in 0:42": the status bar item while its slice has a burst notice. */
export function statusBurstText(
  notice: IBurstNotice,
  secondsLeft: number
): string {
  const when = secondsLeft > 0 ? `in ${formatCountdown(secondsLeft)}` : 'now';
  return `GPU burst: ${actionWords(notice.action).doing} ${when}`;
}

/** The server's words for what it did, in its burst event's message (jupyter_vgpu/server/reclaim/burst.py). */
const DONE_WORDS: { [words: string]: string } = {
  restarted: 'restart',
  interrupted: 'interrupt',
  'shut down': 'shutdown',
  warned: 'warn'
};

/**
 * What a burst event (action `burst`) did, read from its message ("...: restarted to give its
 * burst back", "...: could not be shut down (...)"); null when the message does not say.
 */
export function burstEventAction(e: IWatchdogEvent): string | null {
  const done =
    /: (?:could not be )?(restarted|interrupted|shut down|warned)\b/.exec(
      e.message ?? ''
    )?.[1];
  return done ? DONE_WORDS[done] : null;
}

/**
 * A burst reclaimed, in a sentence that fits a notification: "burst.ipynb's kernel was restarted
 * to give back its 2.1 GiB burst for 1 waiting in line. It keeps its slice." The burst and who
 * waited come from the server's message ("work/burst.ipynb still used 2.1 GiB above its 4.0 GiB
 * request 1 min after its notice, while 1 waiting in line (first: ...): restarted to give its
 * burst back (...)"), which *Details* shows whole.
 */
export function burstEventText(e: IWatchdogEvent, name: string): string {
  const message = e.message ?? '';
  const burst = / still used (.+?) above its /.exec(message)?.[1];
  const who = / while (\d[^(:]*?)(?: \(|:)/.exec(message)?.[1];
  const why = who ? `for ${who}` : 'for someone who needed it';
  const its = burst ? `its ${burst} burst` : 'its burst';
  const action = burstEventAction(e);
  if (!e.ok) {
    const tried = action ? actionWords(action).tried : 'acting on it';
    return `${name}'s kernel still burst while ${who ?? 'someone'} needed the memory, but ${tried} failed.`;
  }
  switch (action) {
    case 'restart':
      return `${name}'s kernel was restarted to give back ${its} ${why}. It keeps its slice, at its request.`;
    case 'interrupt':
      return `${name}'s running cell was interrupted to give back ${its} ${why}.`;
    case 'shutdown':
      return `${name}'s kernel was shut down to give back ${its} ${why}. The notebook is kept.`;
    case 'warn':
      return `${name}'s kernel still uses ${burst ?? 'memory'} above its request while ${who ?? 'someone'} needs it (the admin's policy only warns).`;
    default:
      return `${name}'s GPU burst was reclaimed ${why}.`;
  }
}

/**
 * A waiting row's reason while bursts are given back for it, `age` seconds after the reply:
 * "Bursting kernels give the room back: in 0:42, else restarted" (never refused for a burst).
 */
export function burstDueText(due: IBurstDue, age: number): string {
  const left = Math.max(
    0,
    (isFinite(due.seconds_left) ? due.seconds_left : 0) - Math.max(0, age)
  );
  const when = left > 0 ? `in ${formatCountdown(left)}` : 'now';
  const then: { [action: string]: string } = {
    restart: ', else they restart',
    interrupt: ', else their cells are interrupted',
    shutdown: ', else they shut down'
  };
  return `Bursting kernels give the room back: ${when}${then[due.action] ?? ''}`;
}

/** Whether `e` says the server restarted a kernel (its variables are gone). */
export function restartedBy(e: IWatchdogEvent): 'burst' | 'policy' | null {
  if (!e.ok || !e.kernel_id) {
    return null;
  }
  if (e.action === 'burst' && burstEventAction(e) === 'restart') {
    return 'burst';
  }
  return e.action === 'restart' ? 'policy' : null;
}

/** The mark's words: "Kernel restarted at 14:02:05 to give its GPU burst back: run the cells again". */
export function restartMarkText(
  e: IWatchdogEvent,
  why: 'burst' | 'policy'
): string {
  const at = formatClock(e.t * 1000);
  const reason =
    why === 'burst'
      ? 'to give its GPU burst back'
      : "by the admin's GPU policy";
  return `Kernel restarted at ${at} ${reason}: its variables are gone, run the cells again`;
}
