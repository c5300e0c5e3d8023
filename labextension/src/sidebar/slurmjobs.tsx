/**
 * The user's kernels that run as Slurm jobs (issue 32, "Views on the login node"): each on its
 * node's GPU with its job id, shards and fraction and the use the kernel reports from there; or
 * waiting in Slurm's queue with Slurm's reason and its place, and Cancel (the job is cancelled).
 * Their GPUs are the nodes', never this server's: they are kept out of the GPU cards.
 */
import { closeIcon, kernelIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ISlice, IWaiting } from '../store/api';
import { SliceBar } from './bars';
import { HolderName, WarningMark } from './chips';
import {
  formatBytes,
  formatDuration,
  formatUsage,
  holderLabel,
  slurmJobParts,
  slurmJobText,
  slurmPlaceText,
  slurmReasonText,
  stateText,
  usageNote,
  usedPerGPU,
  waiterLabel
} from '../format/format';
import { ISliceActions } from './slicerow';
import { IWaitingActions, IWaitingRowProps } from './waiting';

export { isSlurmJob } from '../format/format';

/** The kernel's name (cut before its state leaves the line) and "running" or "pending". */
function KernelLine(props: {
  name: string;
  request: string;
  state: 'running' | 'pending' | 'ending';
  /** What the state means for this job. */
  title: string;
}): JSX.Element {
  const { name, request, state, title } = props;
  return (
    <div className="jp-vgpu-SliceRow-line jp-vgpu-SliceRow-sub">
      <kernelIcon.react
        tag="span"
        elementSize="small"
        className="jp-vgpu-SliceRow-kind"
      />
      <span className="jp-vgpu-SlurmRow-kernel" title={`${name}: ${request}`}>
        {name}
      </span>
      <span
        className={`jp-vgpu-Chip jp-vgpu-SlurmRow-state jp-vgpu-mod-${state}`}
        title={title}
      >
        {state}
      </span>
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
        <span className="jp-vgpu-SlurmRow-noBar" />
      )}
      <WarningMark warning={warning} />
      <span
        className="jp-vgpu-SliceRow-memory jp-vgpu-SlurmRow-use"
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
function JobLine(props: {
  row: ISlice | IWaiting;
  title?: string;
}): JSX.Element {
  const parts = slurmJobParts(props.row);
  return (
    <div className="jp-vgpu-SlurmRow-job" title={props.title}>
      {parts.map((part, i) => (
        <React.Fragment key={i}>
          {i > 0 && ' · '}
          <span className="jp-vgpu-SlurmRow-part">{part}</span>
        </React.Fragment>
      ))}
    </div>
  );
}

/** A kernel whose job runs: where, what it holds, and its use. */
export function SlurmJobRow(props: {
  job: ISlice;
  colour: number;
  actions: ISliceActions;
}): JSX.Element {
  const { job, colour, actions } = props;
  const label = holderLabel(job);
  const where = slurmJobText(job);
  const note = job.state === 'unknown' ? usageNote(job) : null;
  const ending = job.ending ?? null;
  const state = ending ? 'ending' : 'running';
  return (
    <li
      className={`jp-vgpu-SliceRow jp-vgpu-SlurmRow jp-vgpu-colour-${colour} jp-vgpu-mod-${job.state} jp-vgpu-mod-${state}`}
      data-job-id={job.job_id}
      data-kernel-id={job.kernel_id ?? ''}
      aria-label={`${label}: ${where}, ${state}`}
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
            {ending && actions.cancelJob && (
              <button
                className="jp-Button jp-mod-minimal jp-mod-styled jp-vgpu-SlurmRow-cancel"
                title={`Cancel Slurm job ${job.job_id} now (its cancel is also retried until Slurm confirms it)`}
                aria-label={`Cancel Slurm job ${job.job_id}`}
                onClick={() => actions.cancelJob?.(job)}
              >
                Cancel
              </button>
            )}
            {!ending && job.running_here && (
              <button
                className="jp-Button jp-mod-minimal jp-vgpu-action-shutdown"
                title="Shut down this kernel (its Slurm job is cancelled)"
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
          title={
            ending ??
            `Slurm runs job ${job.job_id} on ${job.node ?? 'its node'}`
          }
        />
        <JobLine row={job} title={`Enforcement: ${job.tier}`} />
        <Use job={job} colour={colour} />
        {note && <p className="jp-vgpu-SliceRow-note">{note}</p>}
        {ending && (
          <p
            className="jp-vgpu-SlurmRow-notice jp-vgpu-SlurmRow-ending"
            role="status"
          >
            {ending}
          </p>
        )}
        {job.unfenced && (
          <p
            className="jp-vgpu-SlurmRow-notice jp-vgpu-SlurmRow-unfenced"
            role="status"
          >
            Unfenced: {job.unfenced}
          </p>
        )}
        {job.slurm_ended && (
          <p className="jp-vgpu-SlurmRow-ended" role="status">
            {job.slurm_ended}
          </p>
        )}
      </div>
    </li>
  );
}

/** A kernel whose job waits in Slurm's queue: why, its place, and Cancel. */
export function SlurmPendingRow(props: IWaitingRowProps): JSX.Element {
  const { waiter: w, age, actions } = props;
  const label = waiterLabel(w);
  const waited = formatDuration(w.waiting_seconds + age);
  const reason = slurmReasonText(w);
  const place = slurmPlaceText(w);
  return (
    <li
      className="jp-vgpu-Waiting-row jp-vgpu-SlurmRow jp-vgpu-mod-pending"
      data-job-id={w.job_id}
      data-ticket={w.ticket}
      data-path={w.path ?? ''}
      aria-label={`${label}: Slurm job ${w.job_id} pending (${reason}), ${place}, waiting ${waited}`}
    >
      <span
        className="jp-vgpu-Waiting-place"
        title={
          w.position
            ? `Place ${w.position} among the pending jobs of ${w.partition ? `partition ${w.partition}` : 'its partition'} (Slurm's queue)`
            : 'Slurm has not said its place yet'
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
          {w.yours !== false && (
            <button
              className="jp-Button jp-mod-minimal jp-mod-styled jp-vgpu-Waiting-cancel"
              title={`Stop waiting: Slurm job ${w.job_id} is cancelled and ${label} does not start`}
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
          title={`Slurm keeps job ${w.job_id} in its queue: ${reason}`}
        />
        <JobLine row={w} />
        <div
          className="jp-vgpu-SlurmRow-reason"
          title={`Why Slurm keeps job ${w.job_id} pending, in Slurm's word and ours`}
        >
          <div className="jp-vgpu-SlurmRow-why">
            <span className="jp-vgpu-SlurmRow-code">
              {w.slurm_reason ?? 'No reason given yet'}
            </span>
            {w.slurm_reason && w.slurm_reason_text
              ? `: ${w.slurm_reason_text}`
              : ''}
          </div>
          <div className="jp-vgpu-SlurmRow-place">
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

/**
 * The "Slurm jobs" part of the panel: running kernels' jobs (by node, then as they started),
 * then the pending ones in their place in the queue; nothing when there are none.
 */
export function SlurmJobs(props: {
  jobs: ISlice[];
  waiting: IWaiting[];
  /** When the snapshot holding them was taken (ms since the epoch, the browser's clock). */
  taken: number;
  colour: (id: string) => number;
  actions: ISliceActions;
  waitingActions: IWaitingActions;
}): JSX.Element | null {
  const { jobs, waiting, taken, colour, actions, waitingActions } = props;
  if (jobs.length === 0 && waiting.length === 0) {
    return null;
  }
  const age = Math.max(0, (Date.now() - taken) / 1000);
  const running = [...jobs].sort(
    (a, b) =>
      (a.node ?? '').localeCompare(b.node ?? '') || a.created - b.created
  );
  const pending = [...waiting].sort(
    (a, b) => (a.position ?? Infinity) - (b.position ?? Infinity)
  );
  return (
    <section
      className="jp-vgpu-Slurm"
      aria-label="Slurm jobs"
      title="Kernels that run as Slurm jobs on the cluster's GPU nodes. Slurm places them; their shards fence nothing, so each kernel's frameworks are fitted to its job's share."
    >
      <h3 className="jp-vgpu-Waiting-title jp-vgpu-Slurm-title">
        Slurm jobs{' '}
        <span className="jp-vgpu-Waiting-count">
          {jobs.length + waiting.length}
        </span>
        {pending.length > 0 && (
          <span className="jp-vgpu-Slurm-summary">
            {pending.length} pending
          </span>
        )}
      </h3>
      <ol className="jp-vgpu-Waiting-list jp-vgpu-Slurm-list">
        {running.map(job => (
          <SlurmJobRow
            key={job.id}
            job={job}
            colour={colour(job.id)}
            actions={actions}
          />
        ))}
        {pending.map(w => (
          <SlurmPendingRow
            key={String(w.ticket)}
            waiter={w}
            age={age}
            actions={waitingActions}
          />
        ))}
      </ol>
    </section>
  );
}
