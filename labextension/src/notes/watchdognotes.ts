/**
 * The watchdog's events as JupyterLab notifications: each event newer than the page, once,
 * naming the notebook, its use, its slice and what the admin's policy did; an idle reclaim
 * (action `idle`: the server shut an idle kernel down for someone who waited) and a burst given
 * back (action `burst`: the server restarted, interrupted or shut down a kernel still bursting
 * when its notice ran out) as warnings that stay. *Details* shows the server's own message.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { ISlice, IWatchdogEvent } from '../store/api';
import {
  burstEventAction,
  burstEventText,
  formatBytes,
  pathLabel
} from '../format/format';
import { GPUModel } from '../store/model';

/** What the policy did, as the end of a sentence. */
const DONE: { [action: string]: string } = {
  warn: 'over its reservation (the policy only warns)',
  interrupt: "the admin's policy interrupted it",
  restart: "the admin's policy restarted its kernel",
  shutdown: "the admin's policy shut its kernel down"
};

/** What the policy tried, for a failed action. */
const TRIED: { [action: string]: string } = {
  warn: 'warning',
  interrupt: 'interrupting it',
  restart: 'restarting its kernel',
  shutdown: 'shutting its kernel down'
};

/** How long a slice that has gone is remembered (ms): its last events may come after it. */
const REMEMBER_MS = 15 * 60 * 1000;

function eventKey(e: IWatchdogEvent): string {
  return `${e.t}|${e.slice_id}|${e.action}`;
}

/** The notebook an event is about, else its kernel or slice: "train.ipynb". */
function eventHolder(e: IWatchdogEvent, slice: ISlice | undefined): string {
  return (
    pathLabel(e.path ?? slice?.path) ||
    (e.kernel_id ? `kernel ${e.kernel_id.slice(0, 8)}` : `slice ${e.slice_id}`)
  );
}

/**
 * An idle reclaim, in a sentence that fits a notification (JupyterLab cuts one at 140
 * characters): "train.ipynb's kernel was shut down after 42 min idle, to free its GPU for 1
 * waiting in line. The notebook is kept." The idle time and who waited come from the server's
 * message ("work/train.ipynb was idle for 42 min while 1 waiting in line (first: ...): shut down
 * to free its GPU slice 3f2a9c01b7de (...)"), which *Details* shows whole.
 */
export function idleEventText(
  e: IWatchdogEvent,
  slice: ISlice | undefined
): string {
  const name = eventHolder(e, slice);
  const message = e.message ?? '';
  const idle = / was idle for (.+?) while /.exec(message)?.[1];
  const who = / while (\d+ waiting in line)/.exec(message)?.[1];
  const after = idle ? ` after ${idle} idle` : ' while idle';
  const why = who ? `for ${who}` : 'for someone who waited';
  return e.ok
    ? `${name}'s kernel was shut down${after}, to free its GPU ${why}. The notebook is kept.`
    : `${name}'s kernel was idle and someone waited for its GPU, but shutting it down failed.`;
}

/** "train.ipynb uses 5.0 GiB of its 4.0 GiB GPU slice 3f2a9c01b7de: the admin's policy interrupted it." */
export function eventText(
  e: IWatchdogEvent,
  slice: ISlice | undefined
): string {
  if (e.action === 'idle') {
    return idleEventText(e, slice);
  }
  if (e.action === 'burst') {
    return burstEventText(e, eventHolder(e, slice));
  }
  const name = eventHolder(e, slice);
  const used = e.memory_used ?? null;
  const reserved = e.memory_reserved ?? slice?.memory_reserved_total ?? null;
  const use =
    used !== null && reserved !== null
      ? `${e.action === 'warn' ? 'uses' : 'used'} ${formatBytes(used)} of its ${formatBytes(reserved)} GPU slice ${e.slice_id}`
      : `${e.action === 'warn' ? 'uses' : 'used'} more than its GPU slice ${e.slice_id}`;
  const what = e.ok
    ? (DONE[e.action] ?? `the admin's policy: ${e.action}`)
    : `${TRIED[e.action] ?? e.action} failed`;
  return `${name} ${use}: ${what}.`;
}

export class WatchdogNotifier {
  constructor(options: WatchdogNotifier.IOptions) {
    this._model = options.model;
    this._showSidebar = options.showSidebar;
    this._onEvent = options.onEvent ?? null;
    this._model.changed.connect(this._onModel, this);
  }

  dispose(): void {
    this._model.changed.disconnect(this._onModel, this);
  }

  private _onModel(): void {
    const snapshot = this._model.snapshot;
    if (!snapshot || this._model.error) {
      return;
    }
    const events = snapshot.slices.watchdog?.events ?? [];
    if (this._pageLoaded === null) {
      // The page loaded performance.now() ms before this reply (on the server's clock).
      const takenAt = snapshot.slices.taken_at ?? this._model.serverNow();
      this._pageLoaded = takenAt - performance.now() / 1000;
    }
    const seen = new Set<string>();
    const fresh: IWatchdogEvent[] = [];
    for (const e of events) {
      const key = eventKey(e);
      seen.add(key);
      if (!this._seen.has(key) && e.t > this._pageLoaded) {
        fresh.push(e);
      }
    }
    // Only the events the server still lists can come again, so only they are remembered.
    this._seen = seen;
    this._remember(snapshot.slices.slices, snapshot.taken);
    fresh.sort((a, b) => a.t - b.t);
    for (const e of fresh) {
      // An idle reclaim's slice is gone by the time its event comes: the one seen before.
      const slice =
        snapshot.slices.slices.find(s => s.id === e.slice_id) ??
        this._known.get(e.slice_id)?.slice;
      if (slice && slice.yours === false) {
        continue; // another user's slice: their own lab tells them
      }
      this._onEvent?.(e);
      this._notify(e, slice);
    }
  }

  /** Keep the slices seen lately, so that an event after a slice has gone still finds it. */
  private _remember(slices: ISlice[], taken: number): void {
    for (const slice of slices) {
      this._known.set(slice.id, { slice, seen: taken });
    }
    for (const [id, known] of Array.from(this._known)) {
      if (taken - known.seen > REMEMBER_MS) {
        this._known.delete(id);
      }
    }
  }

  private _notify(e: IWatchdogEvent, slice: ISlice | undefined): void {
    const text = eventText(e, slice);
    const idle = e.action === 'idle';
    const burst = e.action === 'burst';
    // A burst given back is the owner's own kernel acted on as announced: a warning, as an
    // idle reclaim; only a failed action is an error.
    const warning = (e.action === 'warn' || idle || burst) && e.ok;
    const stays = idle || (burst && burstEventAction(e) !== 'warn');
    const options = {
      // A warning goes away by itself (the notification centre keeps it); an action, an idle
      // kernel shut down (its notebook stays) or a burst taken back, stays until read.
      autoClose: warning && !stays ? 15000 : (false as const),
      actions: [
        { label: 'Show GPUs', callback: () => this._showSidebar() },
        {
          label: 'Details',
          callback: () =>
            void showDialog({
              title: idle
                ? 'Idle GPU reclaimed'
                : burst
                  ? 'GPU burst given back'
                  : 'GPU watchdog',
              body: e.message || text,
              buttons: [Dialog.okButton()]
            })
        }
      ]
    };
    if (warning) {
      Notification.warning(text, options);
    } else {
      Notification.error(text, options);
    }
  }

  private _known = new Map<string, { slice: ISlice; seen: number }>();
  private _model: GPUModel;
  private _onEvent: ((e: IWatchdogEvent) => void) | null;
  private _pageLoaded: number | null = null;
  private _seen = new Set<string>();
  private _showSidebar: () => void;
}

export namespace WatchdogNotifier {
  export interface IOptions {
    model: GPUModel;
    showSidebar: () => void;
    /** Called with each event told (before its notification). */
    onEvent?: (e: IWatchdogEvent) => void;
  }
}
