/**
 * A notebook whose kernel the server restarted (its burst taken back at the end of its notice,
 * or the admin's watchdog policy) carries a banner above its cells until a cell runs again: its
 * variables are gone. Before, nothing in the notebook said so until a cell failed with
 * `NameError` (issue 49); the notification that says it can be closed, or be in another tab.
 * The banner is JupyterLab's content header, where it says a file is read-only (a toolbar item
 * is folded away into the toolbar's "..." menu on a narrow notebook).
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { KernelMessage } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { pathLabel, restartedBy, restartMarkText } from '../format/format';
import { IWatchdogEvent } from '../store/api';
import { sessionContextOf } from '../store/sessions';

interface IHeaderLike {
  addWidget(widget: Widget): void;
}

/** Marks the open notebooks (and consoles) whose kernel the server restarted. */
export class RestartMarks {
  constructor(options: { widgets: () => Iterable<Widget> }) {
    this._widgets = options.widgets;
  }

  /** Mark every open document whose kernel `e` says the server restarted. */
  mark(e: IWatchdogEvent): void {
    const why = restartedBy(e);
    if (!why) {
      return;
    }
    for (const widget of this._widgets()) {
      const context = sessionContextOf(widget);
      const header = (widget as { contentHeader?: IHeaderLike }).contentHeader;
      if (context?.session?.kernel?.id === e.kernel_id && header) {
        this._markOne(widget, context, header, e, why);
      }
    }
  }

  private _markOne(
    widget: Widget,
    context: ISessionContext,
    header: IHeaderLike,
    e: IWatchdogEvent,
    why: 'burst' | 'policy'
  ): void {
    this._marks.get(widget)?.dispose();
    const mark = new Widget();
    mark.addClass('jp-vgpu-RestartMark');
    mark.node.setAttribute('role', 'status');
    mark.node.textContent = restartMarkText(e, why);
    mark.node.title = `${pathLabel(e.path) || 'This notebook'}: ${e.message}\n(Click to dismiss; it goes when a cell runs.)`;
    mark.node.addEventListener('click', () => mark.dispose());
    header.addWidget(mark);
    this._marks.set(widget, mark);
    // A cell that begins in the kernel (from this page or another) ends the mark.
    const kernel = context.session?.kernel;
    const onMessage = (_: unknown, args: { msg: KernelMessage.IMessage }) => {
      if (args.msg.header.msg_type === 'execute_input') {
        mark.dispose();
      }
    };
    kernel?.anyMessage.connect(onMessage);
    mark.disposed.connect(() => {
      kernel?.anyMessage.disconnect(onMessage);
      if (this._marks.get(widget) === mark) {
        this._marks.delete(widget);
      }
    });
    widget.disposed.connect(() => mark.dispose());
  }

  private _marks = new Map<Widget, Widget>();
  private _widgets: () => Iterable<Widget>;
}
