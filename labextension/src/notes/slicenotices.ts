/**
 * The server's notices about one of your kernels' slices (an idle kernel about to be reclaimed,
 * a burst asked back) as JupyterLab notifications: one per notice, however many refreshes show
 * it, dismissed when the notice is gone. Each kind says its own words and offers its own actions.
 */
import { Notification } from '@jupyterlab/apputils';

import { ISlice } from '../store/api';
import { GPUModel } from '../store/model';

/** What every notice has: when the server gave it (which tells one notice from the next). */
export interface ISliceNotice {
  given: number;
}

/**
 * Follows the model: for each notice (`noticeOf`) on one of your kernels' slices, `notify` once;
 * its notification is dismissed when the notice goes away (or its slice does).
 */
export abstract class SliceNoticeNotifier {
  constructor(model: GPUModel) {
    this.model = model;
    this.model.changed.connect(this._onModel, this);
  }

  dispose(): void {
    this.model.changed.disconnect(this._onModel, this);
    for (const id of this._shown.values()) {
      Notification.dismiss(id);
    }
    this._shown.clear();
  }

  /** The notice this notifier tells of on `slice`, if any. */
  protected abstract noticeOf(slice: ISlice): ISliceNotice | null | undefined;

  /**
   * Show the notification of `slice`'s notice (`received`: when the reply carrying it arrived,
   * ms on the browser's clock); returns the notification's id.
   */
  protected abstract notify(slice: ISlice, received: number): string;

  protected readonly model: GPUModel;

  private _onModel(): void {
    const snapshot = this.model.snapshot;
    if (!snapshot || this.model.error) {
      return; // a failed refresh says nothing about the notices
    }
    const live = new Set<string>();
    for (const slice of snapshot.slices.slices) {
      const notice = this.noticeOf(slice);
      if (
        !notice ||
        slice.holder_kind !== 'kernel' ||
        slice.yours === false // another user's kernel: their own lab tells them
      ) {
        continue;
      }
      const key = `${slice.id}|${notice.given}`;
      live.add(key);
      if (!this._shown.has(key)) {
        this._shown.set(key, this.notify(slice, snapshot.taken));
      }
    }
    for (const [key, id] of Array.from(this._shown)) {
      if (!live.has(key)) {
        this._shown.delete(key);
        Notification.dismiss(id);
      }
    }
  }

  /** Notice key -> the id of its notification. */
  private _shown = new Map<string, string>();
}
