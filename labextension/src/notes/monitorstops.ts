/**
 * `%vgpu monitor` views that outlive their kernel. A kernel restart (or a shutdown, or a death)
 * ends the monitor inside it, but its last picture stays in the notebook, with ipywidgets'
 * "disconnected" icons and a Stop button that does nothing. The kernel cannot say so any more:
 * the page does, in the view's header ("stopped: the kernel restarted at 14:02:05"), and takes
 * the icons and the button away (the stylesheet, by `data-jp-vgpu-stopped`).
 *
 * The monitor's widgets carry the classes `jp-vgpu-Monitor` (the box), `jp-vgpu-Monitor-when`
 * (the header's time) and `jp-vgpu-Monitor-stop` (the button): jupyter_vgpu/kernel/monitor.py.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { IChangedArgs } from '@jupyterlab/coreutils';
import { Kernel } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { formatClock } from '../format/format';
import { sessionContextOf } from '../store/sessions';

/** A live view (not one the kernel stopped itself), and not marked yet. */
const LIVE =
  '.jp-vgpu-Monitor:not(.jp-vgpu-mod-stopped):not([data-jp-vgpu-stopped])';

/**
 * Mark the live monitor views under `root` as stopped for `reason` ("the kernel restarted"):
 * their header says so, their Stop button is disabled (and hidden). Returns how many.
 */
export function markStopped(
  root: ParentNode,
  reason: string,
  now: number = Date.now()
): number {
  const views = Array.from(root.querySelectorAll<HTMLElement>(LIVE));
  for (const view of views) {
    view.dataset.jpVgpuStopped = reason;
    const when = view.querySelector('.jp-vgpu-Monitor-when');
    if (when) {
      when.textContent = `stopped: ${reason} at ${formatClock(now)}`;
    }
    view
      .querySelectorAll<HTMLButtonElement>(
        '.jp-vgpu-Monitor-stop, .jp-vgpu-Monitor-stop button'
      )
      .forEach(button => {
        button.disabled = true;
        button.setAttribute('aria-hidden', 'true');
      });
  }
  return views.length;
}

/** Why a kernel status ends the monitors in it, or null. */
export function stopReason(status: Kernel.Status | string): string | null {
  switch (status) {
    case 'restarting':
    case 'autorestarting':
      return 'the kernel restarted';
    case 'dead':
      return 'the kernel died';
    default:
      return null;
  }
}

/**
 * Follows every notebook (and console) in the main area: when its kernel restarts, dies, is shut
 * down or changed, the monitor views in it are marked stopped.
 */
export class MonitorStops {
  constructor(options: MonitorStops.IOptions) {
    this._widgets = options.widgets;
  }

  /** Follow the widgets not followed yet (call when the main area's layout changes). */
  scan(): void {
    for (const widget of this._widgets()) {
      const context = sessionContextOf(widget);
      if (!context || this._followed.has(context)) {
        continue;
      }
      this._followed.add(context);
      const node = widget.node;
      context.statusChanged.connect((_, status) => {
        const reason = stopReason(status);
        if (reason) {
          markStopped(node, reason);
        }
      });
      context.kernelChanged.connect(
        (_, change: IChangedArgs<Kernel.IKernelConnection | null>) => {
          if (!change.oldValue) {
            return; // a kernel where there was none: nothing ran before
          }
          if (!change.newValue) {
            markStopped(node, 'the kernel was shut down');
          } else if (change.newValue.id !== change.oldValue.id) {
            markStopped(node, 'the kernel was changed');
          }
        }
      );
    }
  }

  private _followed = new WeakSet<ISessionContext>();
  private _widgets: () => Iterable<Widget>;
}

export namespace MonitorStops {
  export interface IOptions {
    /** The main area's widgets (`app.shell.widgets('main')`). */
    widgets: () => Iterable<Widget>;
  }
}
