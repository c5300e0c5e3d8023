/**
 * Follows the requests of this browser's notebooks in the line: says (a JupyterLab
 * notification) when one is granted or leaves the line without a slice, cancels one on
 * request, and tells the status bar item and the refusal dialog what it knows.
 */
import { Notification } from '@jupyterlab/apputils';
import { ISignal, Signal } from '@lumino/signaling';

import { ISlice, IWaiting } from '../store/api';
import {
  formatDuration,
  elsewhereLine,
  elsewhereRef,
  elsewhereText,
  waiterLabel
} from '../format/format';
import { GPUModel } from '../store/model';

/** Refreshes a waiter may be missing from the line before it counts as gone (its slice may
 * show a refresh later than it leaves the line). */
const GRACE_REFRESHES = 3;

/** How long a cancellation from this browser explains a "Stopped waiting" error (ms). */
const CANCEL_MEMORY_MS = 2 * 60 * 1000;

interface ITracked {
  waiter: IWaiting;
  /** When the snapshot that last showed it in line was taken (ms, the browser's clock). */
  seen: number;
  /** Refreshes since it left the line without a slice to show for it. */
  missing: number;
  /** When the first snapshot without it was taken (ms), or null. */
  gone: number | null;
}

export class WaitWatcher {
  constructor(options: WaitWatcher.IOptions) {
    this._model = options.model;
    this._openPaths = options.openPaths;
    this._showSidebar = options.showSidebar;
    this._model.changed.connect(this._onModel, this);
  }

  /** Emits after each refresh of the line. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The request in line for this notebook path or kernel id, if any. */
  waiterFor(path: string | null, kernelId: string | null): IWaiting | null {
    const waiting = this._model.snapshot?.slices.waiting ?? [];
    return (
      waiting.find(
        w =>
          w.holder_kind === 'kernel' &&
          ((path && w.path === path) || (kernelId && w.kernel_id === kernelId))
      ) ?? null
    );
  }

  /** Seconds the snapshot is old: add it to `waiting_seconds`. */
  age(): number {
    const taken = this._model.snapshot?.taken;
    return taken ? Math.max(0, (Date.now() - taken) / 1000) : 0;
  }

  /** Take a request out of the line (its kernel start then fails: "Stopped waiting"). */
  async cancel(w: IWaiting): Promise<void> {
    const label = waiterLabel(w);
    this._cancelled.push({
      ticket: w.ticket,
      path: w.path ?? null,
      at: Date.now()
    });
    try {
      await this._model.client.cancelWaiting(w.ticket);
      Notification.info(
        `Stopped waiting: ${label} did not start. Start its kernel again to get back in line.`,
        { autoClose: 6000 }
      );
    } catch (error) {
      this._cancelled = this._cancelled.filter(c => c.ticket !== w.ticket);
      Notification.error(
        `Could not cancel the request of ${label}: ${error instanceof Error ? error.message : String(error)}`,
        { autoClose: false }
      );
    }
    await this._model.refresh();
  }

  /** Whether this browser cancelled a request (of this notebook, when a path is given) lately. */
  wasCancelled(path: string | null): boolean {
    const now = Date.now();
    this._cancelled = this._cancelled.filter(
      c => now - c.at < CANCEL_MEMORY_MS
    );
    return this._cancelled.some(c => !path || !c.path || c.path === path);
  }

  dispose(): void {
    this._model.changed.disconnect(this._onModel, this);
    Signal.clearData(this);
  }

  private _onModel(): void {
    const snapshot = this._model.snapshot;
    if (!snapshot || this._model.error) {
      return;
    }
    const waiting = snapshot.slices.waiting ?? [];
    const open = this._openPaths();
    const inLine = new Set<number | string>();
    for (const w of waiting) {
      inLine.add(w.ticket);
      const ours =
        w.holder_kind === 'kernel' &&
        w.yours !== false &&
        !!w.path &&
        open.has(w.path);
      if (ours || this._tracked.has(w.ticket)) {
        this._tracked.set(w.ticket, {
          waiter: w,
          seen: snapshot.taken,
          missing: 0,
          gone: null
        });
      }
    }
    for (const [ticket, entry] of Array.from(this._tracked)) {
      if (inLine.has(ticket)) {
        continue;
      }
      const w = entry.waiter;
      if (entry.gone === null) {
        entry.gone = snapshot.taken;
      }
      // It left the line between the refresh that last saw it and the first that did not.
      const waited = formatDuration(
        w.waiting_seconds + Math.max(0, entry.gone - entry.seen) / 2000
      );
      const granted = grantedSlice(w, snapshot.slices.slices);
      if (granted) {
        this._tracked.delete(ticket);
        const there = granted.elsewhere;
        Notification.success(
          there
            ? `${waiterLabel(w)}'s kernel runs: ${elsewhereText(there)}, after waiting ${waited} in ${elsewhereLine(w.elsewhere ?? there)}.`
            : `${waiterLabel(w)} got its GPU slice (${w.request_text}) after waiting ${waited}.`,
          {
            autoClose: 8000,
            actions: [
              { label: 'Show GPUs', callback: () => this._showSidebar() }
            ]
          }
        );
        continue;
      }
      entry.missing += 1;
      if (entry.missing < GRACE_REFRESHES) {
        continue;
      }
      this._tracked.delete(ticket);
      if (this._cancelled.some(c => c.ticket === ticket)) {
        continue; // said when it was cancelled
      }
      const there = w.elsewhere;
      Notification.warning(
        there
          ? `${waiterLabel(w)} left ${elsewhereLine(there)} after ${waited} (job ${elsewhereRef(there)}): its kernel did not start.`
          : `${waiterLabel(w)} stopped waiting for a GPU slice (${w.request_text}) after ${waited}: its kernel did not start.`,
        {
          autoClose: false,
          actions: [{ label: 'Show GPUs', callback: () => this._showSidebar() }]
        }
      );
    }
    this._changed.emit();
  }

  private _cancelled: {
    ticket: number | string;
    path: string | null;
    at: number;
  }[] = [];
  private _changed = new Signal<this, void>(this);
  private _model: GPUModel;
  private _openPaths: () => Set<string>;
  private _showSidebar: () => void;
  private _tracked = new Map<number | string, ITracked>();
}

/** The slice a request got: its kernel's, or (without a kernel id) its notebook's newer one. */
function grantedSlice(w: IWaiting, slices: ISlice[]): ISlice | undefined {
  return slices.find(
    s =>
      s.holder_kind === 'kernel' &&
      ((w.kernel_id && s.kernel_id === w.kernel_id) ||
        (!w.kernel_id &&
          w.path &&
          s.path === w.path &&
          s.created >= (w.created ?? 0) - 1))
  );
}

export namespace WaitWatcher {
  export interface IOptions {
    model: GPUModel;
    /** Paths of the notebooks (and consoles) open in this browser. */
    openPaths: () => Set<string>;
    showSidebar: () => void;
  }
}
