/**
 * A burst asked back, told to the person whose kernel it concerns: a JupyterLab notification
 * while one of your elastic slices has a burst notice, dismissed once the notice goes away (the
 * burst was given back, nobody needs it any more, or the admin's action ran). Nothing keeps a
 * burst, so there is no "Keep it": freeing memory is the answer, which the tooltips explain. The
 * action itself is a watchdog event of action `burst`, which the WatchdogNotifier shows once.
 */
import { Notification } from '@jupyterlab/apputils';

import { ISlice } from '../store/api';
import { burstNotificationText, noticeSecondsLeft } from '../format/format';
import { GPUModel } from '../store/model';
import { ISliceNotice, SliceNoticeNotifier } from './slicenotices';

/**
 * Follows the model: a warning notification for each burst notice on one of your kernels'
 * slices (once per notice), with *Show GPUs*, dismissed when the notice is gone.
 */
export class BurstNotifier extends SliceNoticeNotifier {
  constructor(options: BurstNotifier.IOptions) {
    super(options.model);
    this._showSidebar = options.showSidebar;
  }

  protected noticeOf(slice: ISlice): ISliceNotice | null | undefined {
    return slice.burst_notice;
  }

  protected notify(slice: ISlice, received: number): string {
    const notice = slice.burst_notice!;
    const deadline = received + noticeSecondsLeft(notice, 0) * 1000;
    return Notification.warning(
      burstNotificationText(slice, notice, deadline),
      {
        autoClose: false,
        actions: [{ label: 'Show GPUs', callback: () => this._showSidebar() }]
      }
    );
  }

  private _showSidebar: () => void;
}

export namespace BurstNotifier {
  export interface IOptions {
    model: GPUModel;
    showSidebar: () => void;
  }
}
