/**
 * The line in the sidebar: each request waiting for a slice, its place, what it asks for,
 * how long it has waited, and Cancel for your own.
 */
import { kernelIcon, terminalIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { IWaiting } from '../store/api';
import { HolderName } from './chips';
import { burstDueText, formatDuration, waiterLabel } from '../format/format';

/** What one waiting row can ask the application to do. */
export interface IWaitingActions {
  cancel(w: IWaiting): void;
  openNotebook(path: string): void;
}

/** What a row of the line draws: the request, and how old the snapshot holding it is. */
export interface IWaitingRowProps {
  waiter: IWaiting;
  /** Seconds since the snapshot was taken, added to what the server said. */
  age: number;
  actions: IWaitingActions;
}

function WaitingRow(props: IWaitingRowProps): JSX.Element {
  const { waiter: w, age, actions } = props;
  const label = waiterLabel(w);
  const waited = formatDuration(w.waiting_seconds + age);
  const isKernel = w.holder_kind === 'kernel';
  const KindIcon = isKernel ? kernelIcon : terminalIcon;
  const mine = w.yours !== false;
  const path = w.path;
  return (
    <li
      className="jp-vgpu-Waiting-row"
      data-ticket={w.ticket}
      data-path={path ?? ''}
      aria-label={`${label}: place ${w.position} in line for ${w.request_text}, waiting ${waited}`}
    >
      <span
        className="jp-vgpu-Waiting-place"
        title={`Place ${w.position} in line (first come, first served)`}
      >
        #{w.position}
      </span>
      <div className="jp-vgpu-Waiting-main">
        <div className="jp-vgpu-SliceRow-line">
          <HolderName
            label={label}
            path={isKernel ? path : null}
            className="jp-vgpu-Waiting-holder"
            title={w.holder}
            openNotebook={actions.openNotebook}
          />
          {mine && (
            <button
              className="jp-Button jp-mod-minimal jp-mod-styled jp-vgpu-Waiting-cancel"
              title={`Stop waiting: ${label} then does not start`}
              aria-label={`Cancel waiting for ${label}`}
              onClick={() => actions.cancel(w)}
            >
              Cancel
            </button>
          )}
        </div>
        {/* What it asks for under its name, which keeps the line's room (the command). */}
        <div className="jp-vgpu-SliceRow-line jp-vgpu-SliceRow-sub">
          <KindIcon.react
            tag="span"
            elementSize="small"
            className="jp-vgpu-SliceRow-kind"
          />
          <span className="jp-vgpu-Waiting-kernel">
            {isKernel
              ? (w.kernel_display_name ?? 'kernel')
              : 'jupyter vgpu run'}
            {!mine && w.owner ? `, ${w.owner}` : ''}
          </span>
          <span className="jp-vgpu-Waiting-request">{w.request_text}</span>
          <span className="jp-vgpu-Waiting-time" title="Time waited so far">
            waiting {waited}
          </span>
        </div>
        {w.burst_due && (
          <div
            className="jp-vgpu-SliceRow-line jp-vgpu-Waiting-burst"
            title="Kernels using more than their requests (elastic slices) were asked to give that memory back for this request; a request is never refused because of a burst."
          >
            {burstDueText(w.burst_due, age)}
          </div>
        )}
      </div>
    </li>
  );
}

/** Requests waiting for a slice, in their order in line. */
export function WaitingList(props: {
  waiting: IWaiting[];
  /** When the snapshot holding `waiting` was taken (ms since the epoch, the browser's clock). */
  taken: number;
  actions: IWaitingActions;
}): JSX.Element | null {
  const { waiting, taken, actions } = props;
  if (waiting.length === 0) {
    return null;
  }
  const age = Math.max(0, (Date.now() - taken) / 1000);
  const inLine = [...waiting].sort((a, b) => a.position - b.position);
  return (
    <section className="jp-vgpu-Waiting" aria-label="Waiting for a slice">
      <h3 className="jp-vgpu-Waiting-title">
        Waiting for a slice{' '}
        <span className="jp-vgpu-Waiting-count">{waiting.length}</span>
      </h3>
      <ol className="jp-vgpu-Waiting-list">
        {inLine.map(w => (
          <WaitingRow key={w.ticket} waiter={w} age={age} actions={actions} />
        ))}
      </ol>
    </section>
  );
}
