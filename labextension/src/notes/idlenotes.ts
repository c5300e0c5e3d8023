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
import { ISliceNotice, SliceNoticeNotifier } from './slicenotices';

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

/**
 * Follows the model: a warning notification for each idle notice on one of your kernels' slices
 * (once per notice, however many refreshes show it), dismissed when the notice is gone.
 */
export class IdleNotifier extends SliceNoticeNotifier {
  constructor(options: IdleNotifier.IOptions) {
    super(options.model);
    this._keep = options.keep;
    this._showSidebar = options.showSidebar;
  }

  protected noticeOf(slice: ISlice): ISliceNotice | null | undefined {
    return slice.idle_notice;
  }

  protected notify(slice: ISlice, received: number): string {
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
