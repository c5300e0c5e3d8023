/**
 * The session of a main-area widget: notebooks and consoles have one.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

/** The widget's session context, or null for widgets without a kernel session. */
export function sessionContextOf(
  widget: Widget | null
): ISessionContext | null {
  const context = (widget as { sessionContext?: ISessionContext } | null)
    ?.sessionContext;
  return context && typeof context.kernelChanged?.connect === 'function'
    ? context
    : null;
}
