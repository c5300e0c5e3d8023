/**
 * The server's idle reclaim, told to the person whose kernel it concerns: a JupyterLab
 * notification (with "Keep it") while one of your slices has an idle notice, dismissed once the
 * notice goes away (kept, a cell ran, nobody waits any more, or the kernel was shut down). The
 * reclaim itself is a watchdog event of action `idle`, which the WatchdogNotifier shows once.
 */
import { Notification } from '@jupyterlab/apputils';

import { ISlice } from '../store/api';
import {
  holderLabel,
  idleNotificationText,
  noticeSecondsLeft
} from '../format/format';
import { GPUModel } from '../store/model';

/**
 * The owner's "Keep it" for an idle slice (`POST /api/vgpu/slices/<id>/keep`), then fresh data;
 * a notification says why when the server refuses. True when the server kept it.
 */
export async function keepSlice(
  model: GPUModel,
  slice: ISlice
): Promise<boolean> {
  let kept = false;
  try {
    await model.client.keep(slice.id);
    kept = true;
  } catch (error) {
    Notification.error(
      `Could not keep ${holderLabel(slice)}: ${error instanceof Error ? error.message : String(error)}`,
      { autoClose: false }
    );
  }
  await model.refresh();
  return kept;
}

/** One notice: the slice it is about and when the server gave it. */
function noticeKey(slice: ISlice): string | null {
  const notice = slice.idle_notice;
  return notice ? `${slice.id}|${notice.given}` : null;
}

/**
 * Follows the model: a warning notification for each idle notice on one of your kernels' slices
 * (once per notice, however many refreshes show it), dismissed when the notice is gone.
 */
export class IdleNotifier {
  constructor(options: IdleNotifier.IOptions) {
    this._model = options.model;
    this._keep = options.keep;
    this._showSidebar = options.showSidebar;
    this._model.changed.connect(this._onModel, this);
  }

  dispose(): void {
    this._model.changed.disconnect(this._onModel, this);
    for (const id of this._shown.values()) {
      Notification.dismiss(id);
    }
    this._shown.clear();
  }

  private _onModel(): void {
    const snapshot = this._model.snapshot;
    if (!snapshot || this._model.error) {
      return; // a failed refresh says nothing about the notices
    }
    const live = new Set<string>();
    for (const slice of snapshot.slices.slices) {
      const key = noticeKey(slice);
      if (
        !key ||
        slice.holder_kind !== 'kernel' ||
        slice.yours === false // another user's kernel: their own lab tells them
      ) {
        continue;
      }
      live.add(key);
      if (!this._shown.has(key)) {
        this._shown.set(key, this._notify(slice, snapshot.taken));
      }
    }
    for (const [key, id] of Array.from(this._shown)) {
      if (!live.has(key)) {
        this._shown.delete(key);
        Notification.dismiss(id);
      }
    }
  }

  private _notify(slice: ISlice, received: number): string {
    const notice = slice.idle_notice!;
    const deadline = received + noticeSecondsLeft(notice, 0) * 1000;
    return Notification.warning(idleNotificationText(slice, notice, deadline), {
      autoClose: false,
      actions: [
        {
          label: 'Keep it',
          caption: `Keep the kernel of ${holderLabel(slice)}: it counts as activity`,
          displayType: 'accent',
          callback: () => void this._keep(slice)
        },
        { label: 'Show GPUs', callback: () => this._showSidebar() }
      ]
    });
  }

  private _keep: (slice: ISlice) => Promise<unknown>;
  private _model: GPUModel;
  /** Notice key -> the id of its notification. */
  private _shown = new Map<string, string>();
  private _showSidebar: () => void;
}

export namespace IdleNotifier {
  export interface IOptions {
    model: GPUModel;
    /** "Keep it": `keepSlice`, and whatever else shows the slice refreshed. */
    keep: (slice: ISlice) => Promise<unknown>;
    showSidebar: () => void;
  }
}
