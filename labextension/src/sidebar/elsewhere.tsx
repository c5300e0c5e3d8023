/**
 * The user's kernels that run elsewhere, a card per launcher (issue 40, "Launchers own their
 * views"): each running one where its launcher placed it, with what it holds and the use the
 * kernel reports from there; or waiting in the engine's line with its reason and place, and
 * Cancel. Every word of a row is its launcher's (`elsewhere`, docs/rest.md), shown as it comes:
 * a new launcher gets its own card with no change here. Their GPUs are never this server's:
 * they are kept out of the GPU cards. The class names (`jp-vgpu-Elsewhere...`) name no launcher:
 * every launcher's card looks the same (`data-launcher` tells them apart).
 */
import { closeIcon, kernelIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { IElsewhere, ILauncherInfo, ISlice, IWaiting } from '../store/api';
import { SliceBar } from './bars';
import { HolderName, WarningMark } from './chips';
import {
  elsewhereNotice,
  elsewherePlaceText,
  elsewhereReasonText,
  elsewhereRef,
  elsewhereText,
  formatBytes,
  formatDuration,
  formatUsage,
  holderLabel,
  stateText,
  usageNote,
  usedPerGPU,
  waiterLabel,
  ELSEWHERE_SIMULATED
} from '../format/format';
import { ISliceActions } from './slicerow';
import { IWaitingActions, IWaitingRowProps } from './waiting';

/** The kernel's name (cut before its state leaves the line) and "running" or "pending". */
function KernelLine(props: {
  name: string;
  request: string;
  state: 'running' | 'pending' | 'ending';
  /** What the state means for this job. */
  title: string;
  /** Its GPUs are simulated (where it runs). */
  simulated?: boolean;
}): JSX.Element {
  const { name, request, state, title, simulated } = props;
  return (
    <div className="jp-vgpu-SliceRow-line jp-vgpu-SliceRow-sub">
      <kernelIcon.react
        tag="span"
        elementSize="small"
        className="jp-vgpu-SliceRow-kind"
      />
      <span
        className="jp-vgpu-ElsewhereRow-kernel"
        title={`${name}: ${request}`}
      >
        {name}
      </span>
      <span
        className={`jp-vgpu-Chip jp-vgpu-ElsewhereRow-state jp-vgpu-mod-${state}`}
        title={title}
      >
        {state}
      </span>
      {simulated && (
        <span
          className="jp-vgpu-Chip jp-vgpu-mod-simulated"
          title={ELSEWHERE_SIMULATED}
        >
          simulated
        </span>
      )}
    </div>
  );
}

/** What the kernel uses on its node's GPU: a bar of the job's share once its budget is known. */
function Use(props: { job: ISlice; colour: number }): JSX.Element {
  const { job, colour } = props;
  const used = usedPerGPU(job);
  const warning = stateText(job);
  return (
    <div className="jp-vgpu-SliceRow-line">
      {job.memory_reserved ? (
        <SliceBar slice={job} colour={colour} />
      ) : (
        <span className="jp-vgpu-ElsewhereRow-noBar" />
      )}
      <WarningMark warning={warning} />
      <span
        className="jp-vgpu-SliceRow-memory jp-vgpu-ElsewhereRow-use"
        title={usageNote(job) ?? undefined}
      >
        {job.memory_reserved
          ? formatUsage(used, job.memory_reserved)
          : used === null
            ? 'use not reported yet'
            : `${formatBytes(used)} used`}
      </span>
    </div>
  );
}

/** "Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)", broken between its parts only. */
function JobLine(props: { where: IElsewhere; title?: string }): JSX.Element {
  const parts =
    props.where.where.length > 0 ? props.where.where : [props.where.name];
  return (
    <div className="jp-vgpu-ElsewhereRow-job" title={props.title}>
      {parts.map((part, i) => (
        <React.Fragment key={i}>
          {i > 0 && ' · '}
          <span className="jp-vgpu-ElsewhereRow-part">{part}</span>
        </React.Fragment>
      ))}
    </div>
  );
}

/** A kernel that runs elsewhere: where, what it holds, and its use. */
export function ElsewhereRow(props: {
  job: ISlice;
  where: IElsewhere;
  colour: number;
  actions: ISliceActions;
}): JSX.Element {
  const { job, where: e, colour, actions } = props;
  const label = holderLabel(job);
  const note = job.state === 'unknown' ? usageNote(job) : null;
  const state = e.state === 'pending' ? 'running' : e.state;
  const ending = state === 'ending';
  const notice = elsewhereNotice(e);
  return (
    <li
      className={`jp-vgpu-SliceRow jp-vgpu-ElsewhereRow jp-vgpu-colour-${colour} jp-vgpu-mod-${job.state} jp-vgpu-mod-${state}`}
      data-job-id={elsewhereRef(e)}
      data-launcher={e.launcher}
      data-kernel-id={job.kernel_id ?? ''}
      aria-label={`${label}: ${elsewhereText(e)}, ${state}`}
    >
      <span
        className={`jp-vgpu-SliceRow-dot jp-vgpu-colour-${colour}`}
        aria-hidden="true"
      />
      <div className="jp-vgpu-SliceRow-main">
        <div className="jp-vgpu-SliceRow-line">
          <HolderName
            label={label}
            path={job.path}
            className="jp-vgpu-SliceRow-holder"
            openNotebook={actions.openNotebook}
          />
          <span className="jp-vgpu-SliceRow-actions">
            {ending && e.cancel && actions.cancelJob && (
              <button
                className="jp-Button jp-mod-minimal jp-mod-styled jp-vgpu-ElsewhereRow-cancel"
                title={`Cancel ${e.name} now (its cancel is also retried until it is confirmed)`}
                aria-label={`Cancel ${e.name}`}
                onClick={() => actions.cancelJob?.(job)}
              >
                Cancel
              </button>
            )}
            {!ending && job.running_here && (
              <button
                className="jp-Button jp-mod-minimal jp-vgpu-action-shutdown"
                title={`Shut down this kernel (${e.name} is cancelled)`}
                aria-label="Shut down kernel"
                onClick={() => actions.shutdownKernel(job)}
              >
                <closeIcon.react tag="span" elementSize="small" />
              </button>
            )}
          </span>
        </div>
        <KernelLine
          name={actions.kernelDisplayName(job)}
          request={job.request_text}
          state={state}
          title={e.state_title}
          simulated={e.simulated}
        />
        <JobLine where={e} title={`Enforcement: ${job.tier}`} />
        <Use job={job} colour={colour} />
        {note && <p className="jp-vgpu-SliceRow-note">{note}</p>}
        {notice && (
          <p
            className={`jp-vgpu-ElsewhereRow-notice ${ending ? 'jp-vgpu-ElsewhereRow-ending' : 'jp-vgpu-ElsewhereRow-unfenced'}`}
            role="status"
          >
            {notice}
          </p>
        )}
        {e.ended && (
          <p className="jp-vgpu-ElsewhereRow-ended" role="status">
            {e.ended}
          </p>
        )}
      </div>
    </li>
  );
}

/** A kernel that waits in its engine's line: why, its place, and Cancel. */
export function ElsewherePendingRow(
  props: IWaitingRowProps & { where: IElsewhere }
): JSX.Element {
  const { waiter: w, where: e, age, actions } = props;
  const label = waiterLabel(w);
  const waited = formatDuration(w.waiting_seconds + age);
  const reason = elsewhereReasonText(e);
  const place = elsewherePlaceText(e, w.position);
  return (
    <li
      className="jp-vgpu-Waiting-row jp-vgpu-ElsewhereRow jp-vgpu-mod-pending"
      data-job-id={elsewhereRef(e)}
      data-launcher={e.launcher}
      data-ticket={w.ticket}
      data-path={w.path ?? ''}
      aria-label={`${label}: ${e.name} pending (${reason}), ${place}, waiting ${waited}`}
    >
      <span
        className="jp-vgpu-Waiting-place"
        title={
          w.position
            ? `${place[0].toUpperCase()}${place.slice(1)}`
            : 'Its place in line is not known yet'
        }
      >
        #{w.position ?? '?'}
      </span>
      <div className="jp-vgpu-Waiting-main">
        <div className="jp-vgpu-SliceRow-line">
          <HolderName
            label={label}
            path={w.path}
            className="jp-vgpu-Waiting-holder"
            openNotebook={actions.openNotebook}
          />
          {w.yours !== false && e.cancel && (
            <button
              className="jp-Button jp-mod-minimal jp-mod-styled jp-vgpu-Waiting-cancel"
              title={`Stop waiting: ${e.name} is cancelled and ${label} does not start`}
              aria-label={`Cancel waiting for ${label}`}
              onClick={() => actions.cancel(w)}
            >
              Cancel
            </button>
          )}
        </div>
        <KernelLine
          name={w.kernel_display_name ?? 'kernel'}
          request={w.request_text}
          state="pending"
          title={e.state_title}
        />
        <JobLine where={e} />
        <div
          className="jp-vgpu-ElsewhereRow-reason"
          title={`Why ${e.name} waits, in its engine's word and ours`}
        >
          <div className="jp-vgpu-ElsewhereRow-why">
            <span className="jp-vgpu-ElsewhereRow-code">
              {e.reason ?? 'No reason given yet'}
            </span>
            {e.reason && e.reason_text ? `: ${e.reason_text}` : ''}
          </div>
          <div className="jp-vgpu-ElsewhereRow-place">
            {place[0].toUpperCase() + place.slice(1)} ·{' '}
            <span className="jp-vgpu-Waiting-time" title="Time waited so far">
              waiting {waited}
            </span>
          </div>
        </div>
      </div>
    </li>
  );
}

/** One launcher's rows, running and waiting, with the launcher as the server names it. */
interface ILauncherRows {
  name: string;
  title: string;
  runs: string | null;
  running: { row: ISlice; where: IElsewhere }[];
  pending: { row: IWaiting; where: IElsewhere }[];
}

/**
 * The rows of kernels that run elsewhere, by launcher: the reply's `launchers` first in their
 * order (those with rows), then any other launcher a row names, in the order its rows come.
 */
export function byLauncher(
  slices: ISlice[],
  waiting: IWaiting[],
  launchers: ILauncherInfo[] = []
): ILauncherRows[] {
  const groups = new Map<string, ILauncherRows>();
  const group = (e: IElsewhere): ILauncherRows => {
    let g = groups.get(e.launcher);
    if (!g) {
      const info = launchers.find(l => l.name === e.launcher);
      g = {
        name: e.launcher,
        title: e.title || info?.title || e.launcher,
        runs: info?.runs ?? null,
        running: [],
        pending: []
      };
      groups.set(e.launcher, g);
    }
    return g;
  };
  for (const row of slices) {
    if (row.elsewhere) {
      group(row.elsewhere).running.push({ row, where: row.elsewhere });
    }
  }
  for (const row of waiting) {
    if (row.elsewhere) {
      group(row.elsewhere).pending.push({ row, where: row.elsewhere });
    }
  }
  const order = launchers.map(l => l.name);
  const rank = (name: string) => {
    const i = order.indexOf(name);
    return i < 0 ? order.length : i;
  };
  return [...groups.values()].sort((a, b) => rank(a.name) - rank(b.name));
}

/**
 * One launcher's card: its running kernels (by where they run, then as they started), then the
 * waiting ones in their place in line.
 */
export function ElsewhereCard(props: {
  launcher: ILauncherRows;
  /** When the snapshot holding them was taken (ms since the epoch, the browser's clock). */
  taken: number;
  colour: (id: string) => number;
  actions: ISliceActions;
  waitingActions: IWaitingActions;
}): JSX.Element {
  const { launcher, taken, colour, actions, waitingActions } = props;
  const age = Math.max(0, (Date.now() - taken) / 1000);
  const running = [...launcher.running].sort(
    (a, b) =>
      a.row.gpus.join(',').localeCompare(b.row.gpus.join(',')) ||
      a.row.created - b.row.created
  );
  const pending = [...launcher.pending].sort(
    (a, b) => (a.row.position ?? Infinity) - (b.row.position ?? Infinity)
  );
  return (
    <section
      className="jp-vgpu-Elsewhere"
      data-launcher={launcher.name}
      aria-label={launcher.title}
      title={launcher.runs ? `${launcher.runs}.` : undefined}
    >
      <h3 className="jp-vgpu-Waiting-title jp-vgpu-Elsewhere-title">
        {launcher.title}{' '}
        <span className="jp-vgpu-Waiting-count">
          {running.length + pending.length}
        </span>
        {pending.length > 0 && (
          <span className="jp-vgpu-Elsewhere-summary">
            {pending.length} pending
          </span>
        )}
      </h3>
      <ol className="jp-vgpu-Waiting-list jp-vgpu-Elsewhere-list">
        {running.map(({ row, where }) => (
          <ElsewhereRow
            key={row.id}
            job={row}
            where={where}
            colour={colour(row.id)}
            actions={actions}
          />
        ))}
        {pending.map(({ row, where }) => (
          <ElsewherePendingRow
            key={String(row.ticket)}
            waiter={row}
            where={where}
            age={age}
            actions={waitingActions}
          />
        ))}
      </ol>
    </section>
  );
}

/** A card per launcher whose kernels run or wait elsewhere; nothing when there are none. */
export function ElsewhereCards(props: {
  slices: ISlice[];
  waiting: IWaiting[];
  launchers?: ILauncherInfo[];
  taken: number;
  colour: (id: string) => number;
  actions: ISliceActions;
  waitingActions: IWaitingActions;
}): JSX.Element | null {
  const groups = byLauncher(props.slices, props.waiting, props.launchers);
  if (groups.length === 0) {
    return null;
  }
  return (
    <>
      {groups.map(launcher => (
        <ElsewhereCard
          key={launcher.name}
          launcher={launcher}
          taken={props.taken}
          colour={props.colour}
          actions={props.actions}
          waitingActions={props.waitingActions}
        />
      ))}
    </>
  );
}
