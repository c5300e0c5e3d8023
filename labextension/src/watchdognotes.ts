/**
 * The watchdog's events as JupyterLab notifications: each event newer than the page, once,
 * naming the notebook, its use, its slice and what the admin's policy did.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { ISlice, IWatchdogEvent } from './api';
import { formatBytes, pathLabel } from './format';
import { GPUModel } from './model';

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

function eventKey(e: IWatchdogEvent): string {
  return `${e.t}|${e.slice_id}|${e.action}`;
}

/** "train.ipynb uses 5.0 GiB of its 4.0 GiB GPU slice 3f2a9c01b7de: the admin's policy interrupted it." */
export function eventText(
  e: IWatchdogEvent,
  slice: ISlice | undefined
): string {
  const name =
    pathLabel(e.path ?? slice?.path) ||
    (e.kernel_id ? `kernel ${e.kernel_id.slice(0, 8)}` : `slice ${e.slice_id}`);
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
    fresh.sort((a, b) => a.t - b.t);
    for (const e of fresh) {
      const slice = snapshot.slices.slices.find(s => s.id === e.slice_id);
      if (slice && slice.yours === false) {
        continue; // another user's slice: their own lab tells them
      }
      this._notify(e, slice);
    }
  }

  private _notify(e: IWatchdogEvent, slice: ISlice | undefined): void {
    const text = eventText(e, slice);
    const warning = e.action === 'warn' && e.ok;
    const options = {
      // A warning goes away by itself (the notification centre keeps it); an action stays.
      autoClose: warning ? 15000 : (false as const),
      actions: [
        { label: 'Show GPUs', callback: () => this._showSidebar() },
        {
          label: 'Details',
          callback: () =>
            void showDialog({
              title: 'GPU watchdog',
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

  private _model: GPUModel;
  private _pageLoaded: number | null = null;
  private _seen = new Set<string>();
  private _showSidebar: () => void;
}

export namespace WatchdogNotifier {
  export interface IOptions {
    model: GPUModel;
    showSidebar: () => void;
  }
}
