/**
 * The status bar item: the slice of the current notebook's (or console's) kernel, or its
 * place in line while its kernel waits for one, or the countdown while the server asks its
 * burst back or is about to reclaim its idle slice.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import * as React from 'react';

import { IHostUsage, IIdleNotice, ISlice, IWaiting } from '../store/api';
import { useNoticeCountdown } from '../sidebar/countdown';
import {
  burstNoticeDetails,
  formatDuration,
  formatHost,
  hostGlance,
  idleNoticeDetails,
  pathLabel,
  SIMULATED_NOTE,
  elsewhereWaitingText,
  elsewhereWaitingTitle,
  statusBurstText,
  statusIdleText,
  statusText,
  statusTitle,
  statusSimulated
} from '../format/format';
import { gpuIcon } from '../icons';
import { GPUModel } from '../store/model';

export { sessionContextOf } from '../store/sessions';

/** Where the item learns about the line (the sidebar's model, through a WaitWatcher). */
export interface ILineSource {
  readonly changed: ISignal<unknown, void>;
  waiterFor(path: string | null, kernelId: string | null): IWaiting | null;
  /** Seconds since the line was read. */
  age(): number;
}

/**
 * Follows one session context at a time and reads its kernel's slice from the one store the
 * other views read (`slice` is null for kernels without one); while it follows a kernel, the
 * store's poll brings that kernel's host use along with the slices. With a line source,
 * `waiter` is the notebook's request while its kernel waits in line for a slice.
 */
export class KernelSliceModel {
  constructor(model: GPUModel, line?: ILineSource) {
    this._model = model;
    this._line = line ?? null;
    this._line?.changed.connect(this._onLine, this);
    this._model.changed.connect(this._onModel, this);
    this._unsubscribe = model.subscribe(() => {
      const id = this._kernelId();
      return id ? { host: id } : null;
    });
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get slice(): ISlice | null {
    return this._slice;
  }

  /** When the reply holding `slice` arrived (ms, the browser's clock). */
  get received(): number {
    return this._received;
  }

  /** What the slice's kernel uses of the host (null: unknown, or an older server). */
  get host(): IHostUsage | null {
    return this._slice?.host ?? null;
  }

  /** Whether the server's GPUs are simulated. */
  get simulated(): boolean {
    const snapshot = this._model.snapshot;
    return !!(snapshot?.slices.simulated || snapshot?.devices.simulated);
  }

  /** The request of this notebook waiting in line, while it has no slice. */
  get waiter(): IWaiting | null {
    return this._slice ? null : this._waiter;
  }

  /** Seconds since `waiter` was read. */
  get waiterAge(): number {
    return this._line?.age() ?? 0;
  }

  /** The path of the followed notebook or console. */
  get path(): string | null {
    return this._context?.path ?? null;
  }

  /** Ask the server again now (also re-evaluates whether the item shows). */
  refresh(): Promise<void> {
    this._onModel();
    return this._model.refresh();
  }

  /** Follow this session context (a notebook's or console's), or none. */
  set sessionContext(context: ISessionContext | null) {
    if (context === this._context) {
      return;
    }
    this._context?.kernelChanged.disconnect(this._onKernel, this);
    this._context?.statusChanged.disconnect(this._onKernel, this);
    this._context = context;
    context?.kernelChanged.connect(this._onKernel, this);
    context?.statusChanged.connect(this._onKernel, this);
    this._onKernel();
    this._onLine();
  }

  dispose(): void {
    this.sessionContext = null;
    this._unsubscribe();
    this._line?.changed.disconnect(this._onLine, this);
    this._model.changed.disconnect(this._onModel, this);
    Signal.clearData(this);
  }

  private _kernelId(): string | null {
    return this._context?.session?.kernel?.id ?? null;
  }

  /** Another kernel (or none): its slice as the store has it now, then fresh data. */
  private _onKernel(): void {
    const id = this._kernelId();
    if (id !== this._lastKernelId) {
      this._lastKernelId = id;
      this._onModel(); // never show the previous kernel's slice for this one
      if (id) {
        void this._model.refresh();
      }
    }
  }

  private _onModel(): void {
    const id = this._kernelId();
    // While the server fails, show nothing rather than what it said a while ago.
    const slice = id && !this._model.error ? this._model.kernelSlice(id) : null;
    this._slice = slice;
    this._received = this._model.snapshot?.taken ?? Date.now();
    this._changed.emit();
  }

  private _onLine(): void {
    const waiter = this._line?.waiterFor(this.path, this._kernelId()) ?? null;
    if (waiter || this._waiter) {
      this._waiter = waiter;
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _context: ISessionContext | null = null;
  private _lastKernelId: string | null = null;
  private _line: ILineSource | null;
  private _model: GPUModel;
  private _received = Date.now();
  private _slice: ISlice | null = null;
  private _unsubscribe: () => void;
  private _waiter: IWaiting | null = null;
}

/** "GPU: waiting #2 (1/2 GPU) 42 s": the notebook's place in line; a click opens the sidebar. */
function Waiting(props: {
  waiter: IWaiting;
  age: number;
  simulated: boolean;
  onClick: () => void;
}): JSX.Element {
  const { waiter: w, age, simulated, onClick } = props;
  const waited = formatDuration(w.waiting_seconds + age);
  const name = pathLabel(w.path) || 'This kernel';
  const there = w.elsewhere ?? null;
  const title = there
    ? elsewhereWaitingTitle(w, there, waited)
    : `${name} waits in line for ${w.request_text}: place ${w.position}, waiting ${waited}.${simulated ? `\n${SIMULATED_NOTE}` : ''}`;
  return (
    <button
      className={`jp-vgpu-StatusItem-content jp-vgpu-mod-waiting${there ? ` jp-vgpu-mod-elsewhere jp-vgpu-mod-${there.launcher}` : ''}`}
      title={`${title}\nClick to show the GPUs panel (Cancel is there).`}
      onClick={onClick}
    >
      <gpuIcon.react
        tag="span"
        elementSize="small"
        className="jp-vgpu-StatusItem-icon"
      />
      <span className="jp-vgpu-StatusItem-text">
        {there
          ? elsewhereWaitingText(w, there)
          : `GPU: waiting #${w.position} (${w.request_text})`}
      </span>
      <span className="jp-vgpu-StatusItem-time">{waited}</span>
    </button>
  );
}

/** The kinds of notice a slice can be under, in the order the status bar shows them. */
export type NoticeKind = 'burst' | 'idle';

/**
 * What the status bar's countdown says for each kind of notice: the notice on the slice, the
 * button's modifier, its text and its tooltip. A third kind of notice is one more entry.
 */
const COUNTDOWN_WORDS: Record<
  NoticeKind,
  {
    notice: (slice: ISlice) => IIdleNotice | null;
    modifier: string;
    text: (slice: ISlice, left: number) => string;
    details: (slice: ISlice, deadline: number) => string;
  }
> = {
  // "GPU burst: restarting in 0:42": the server asks the notebook's burst back for someone who
  // needs the memory, then applies the admin's action; the tooltip says how much, for whom, what
  // happens and how freeing memory ends it. Nothing keeps a burst: no "Keep it" anywhere.
  burst: {
    notice: slice => slice.burst_notice ?? null,
    modifier: 'jp-vgpu-mod-burstNotice',
    text: (slice, left) =>
      slice.burst_notice ? statusBurstText(slice.burst_notice, left) : '',
    details: (slice, deadline) =>
      slice.burst_notice
        ? burstNoticeDetails(slice, slice.burst_notice, deadline)
        : ''
  },
  // "GPU idle: shutting down in 4:32": the server is about to shut the notebook's idle kernel
  // down for someone who needs the room; the tooltip says why and that running a cell keeps it.
  idle: {
    notice: slice => slice.idle_notice ?? null,
    modifier: 'jp-vgpu-mod-idle',
    text: (_slice, left) => statusIdleText(left),
    details: (slice, deadline) =>
      slice.idle_notice
        ? idleNoticeDetails(slice, slice.idle_notice, deadline)
        : ''
  }
};

/** The kind of notice the status bar shows for the slice: its burst's when the server asks it
 * back (bursts are given back before idle kernels are reclaimed, so that one comes first), else
 * its idle notice's; null without one. */
export function noticeKindOf(slice: ISlice): NoticeKind | null {
  return slice.burst_notice ? 'burst' : slice.idle_notice ? 'idle' : null;
}

/** The countdown of a notice on the slice, in the words of its kind (`COUNTDOWN_WORDS`). */
export function NoticeCountdown(props: {
  slice: ISlice;
  received: number;
  title: string;
  onClick: () => void;
}): JSX.Element {
  const { slice, received, title, onClick } = props;
  const words = COUNTDOWN_WORDS[noticeKindOf(slice) ?? 'idle'];
  const { left, deadline } = useNoticeCountdown(words.notice(slice), received);
  return (
    <button
      className={`jp-vgpu-StatusItem-content ${words.modifier}`}
      title={`${words.details(slice, deadline)}\n${title}`}
      onClick={onClick}
    >
      <gpuIcon.react
        tag="span"
        elementSize="small"
        className="jp-vgpu-StatusItem-icon"
      />
      <span className="jp-vgpu-StatusItem-text">{words.text(slice, left)}</span>
    </button>
  );
}

/**
 * "GPU 2.1 / 4.0 GiB" ("GPU 2.1 / 4.0 GiB · simulated" on simulated GPUs), coloured when near or
 * over the slice; its tooltip adds the kernel's CPU and RAM. A click opens the sidebar.
 */
export class GPUStatusItem extends ReactWidget {
  constructor(model: KernelSliceModel, onClick: () => void) {
    super();
    this.model = model;
    this._onClick = onClick;
    this.addClass('jp-vgpu-StatusItem');
    this.addClass('jp-mod-highlighted');
  }

  readonly model: KernelSliceModel;

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => {
          const slice = this.model.slice;
          const waiter = this.model.waiter;
          if (!slice && waiter) {
            return (
              <Waiting
                waiter={waiter}
                age={this.model.waiterAge}
                simulated={this.model.simulated}
                onClick={this._onClick}
              />
            );
          }
          if (!slice) {
            return <span />;
          }
          // A kernel that runs elsewhere: this server's (simulated) GPUs are not its; its own
          // node's are as it reports.
          const simulated = statusSimulated(slice, this.model.simulated);
          if (slice.burst_notice || slice.idle_notice) {
            return (
              <NoticeCountdown
                slice={slice}
                received={this.model.received}
                title={statusTitle(slice, this.model.host, simulated)}
                onClick={this._onClick}
              />
            );
          }
          return (
            <span
              className={`jp-vgpu-StatusItem-content jp-vgpu-mod-${slice.state}`}
              title={statusTitle(slice, this.model.host, simulated)}
              onClick={this._onClick}
            >
              <gpuIcon.react
                tag="span"
                elementSize="small"
                className="jp-vgpu-StatusItem-icon"
              />
              <span className="jp-vgpu-StatusItem-text">
                {statusText(slice)}
              </span>
              {simulated && (
                <span className="jp-vgpu-StatusItem-simulated">
                  {' · simulated'}
                </span>
              )}
            </span>
          );
        }}
      </UseSignal>
    );
  }

  private _onClick: () => void;
}

/**
 * "CPU 12% · RAM 310 MiB": the kernel's use of the host at a glance, beside its GPU item, as
 * jupyter-resource-usage shows it (its process and every descendant). A click opens the sidebar,
 * whose header has the host's own.
 */
export class HostStatusItem extends ReactWidget {
  constructor(model: KernelSliceModel, onClick: () => void) {
    super();
    this.model = model;
    this._onClick = onClick;
    this.addClass('jp-vgpu-HostItem');
  }

  readonly model: KernelSliceModel;

  /** Whether there is anything to show: the followed kernel's use of the host is known. */
  get hasFigures(): boolean {
    return hostGlance(this.model.host) !== null;
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => {
          const text = hostGlance(this.model.host);
          return text ? (
            <span
              className="jp-vgpu-HostItem-content"
              title={`This kernel's use of the host: ${formatHost(this.model.host)}.\nIts process and every process it started, as jupyter-resource-usage counts them. Click to show the GPUs panel (its header has the host's own).`}
              onClick={this._onClick}
            >
              {text}
            </span>
          ) : (
            <span />
          );
        }}
      </UseSignal>
    );
  }

  private _onClick: () => void;
}
