/**
 * The status bar item: the slice of the current notebook's (or console's) kernel, or its
 * place in line while its kernel waits for one, or the countdown while the server is about to
 * reclaim its idle slice.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { IHostUsage, ISlice, IWaiting, VGPUClient } from './api';
import { useNoticeCountdown } from './countdown';
import {
  formatDuration,
  idleNoticeDetails,
  pathLabel,
  SIMULATED_NOTE,
  statusIdleText,
  statusText,
  statusTitle
} from './format';
import { gpuIcon } from './icons';

/** Where the item learns about the line (the sidebar's model, through a WaitWatcher). */
export interface ILineSource {
  readonly changed: ISignal<unknown, void>;
  waiterFor(path: string | null, kernelId: string | null): IWaiting | null;
  /** Seconds since the line was read. */
  age(): number;
}

/**
 * Follows one session context at a time and keeps its kernel's slice fresh
 * (`GET /api/vgpu/kernels/<id>`); `slice` is null for kernels without one. With a line
 * source, `waiter` is the notebook's request while its kernel waits in line for a slice.
 */
export class KernelSliceModel {
  constructor(
    client: VGPUClient,
    interval: number,
    line?: ILineSource,
    simulated?: () => boolean
  ) {
    this._client = client;
    this._line = line ?? null;
    this._simulated = simulated ?? (() => false);
    this._line?.changed.connect(this._onLine, this);
    this._poll = new Poll({
      auto: true,
      factory: () => this._fetch(),
      frequency: { interval, backoff: true, max: 60 * 1000 },
      name: 'jupyter-vgpu:status',
      standby: () => (this._kernelId() ? 'when-hidden' : true)
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
    return this._slice ? this._host : null;
  }

  /** Whether the server's GPUs are simulated. */
  get simulated(): boolean {
    return this._simulated();
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

  set interval(ms: number) {
    this._poll.frequency = { ...this._poll.frequency, interval: ms };
  }

  /** Ask the server again now (also re-evaluates whether the item shows). */
  refresh(): Promise<void> {
    return this._poll.refresh();
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
    this._line?.changed.disconnect(this._onLine, this);
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _kernelId(): string | null {
    return this._context?.session?.kernel?.id ?? null;
  }

  private _onKernel(): void {
    const id = this._kernelId();
    if (id !== this._lastKernelId) {
      this._lastKernelId = id;
      this._host = null;
      this._set(null); // never show the previous kernel's slice for this one
    }
    void this._poll.refresh();
  }

  private async _fetch(): Promise<void> {
    const id = this._kernelId();
    if (!id) {
      this._set(null);
      return;
    }
    try {
      const reply = await this._client.kernel(id);
      if (id === this._kernelId()) {
        this._host = reply?.host ?? null;
        this._set(reply?.slice ?? null);
      }
    } catch (error) {
      this._set(null);
      throw error;
    }
  }

  private _onLine(): void {
    const waiter = this._line?.waiterFor(this.path, this._kernelId()) ?? null;
    if (waiter || this._waiter) {
      this._waiter = waiter;
      this._changed.emit();
    }
  }

  private _set(slice: ISlice | null): void {
    this._slice = slice;
    this._received = Date.now();
    this._changed.emit();
  }

  private _changed = new Signal<this, void>(this);
  private _client: VGPUClient;
  private _context: ISessionContext | null = null;
  private _lastKernelId: string | null = null;
  private _line: ILineSource | null;
  private _poll: Poll;
  private _received = Date.now();
  private _host: IHostUsage | null = null;
  private _simulated: () => boolean;
  private _slice: ISlice | null = null;
  private _waiter: IWaiting | null = null;
}

/** Whether a widget has a kernel session (notebooks and consoles do). */
export function sessionContextOf(
  widget: Widget | null
): ISessionContext | null {
  const context = (widget as { sessionContext?: ISessionContext } | null)
    ?.sessionContext;
  return context && typeof context.kernelChanged?.connect === 'function'
    ? context
    : null;
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
  return (
    <button
      className="jp-vgpu-StatusItem-content jp-vgpu-mod-waiting"
      title={`${name} waits in line for ${w.request_text}: place ${w.position}, waiting ${waited}.${simulated ? `\n${SIMULATED_NOTE}` : ''}\nClick to show the GPUs panel (Cancel is there).`}
      onClick={onClick}
    >
      <gpuIcon.react
        tag="span"
        elementSize="small"
        className="jp-vgpu-StatusItem-icon"
      />
      <span className="jp-vgpu-StatusItem-text">
        GPU: waiting #{w.position} ({w.request_text})
      </span>
      <span className="jp-vgpu-StatusItem-time">{waited}</span>
    </button>
  );
}

/**
 * "GPU idle: shutting down in 4:32": the server is about to shut the notebook's idle kernel down
 * for someone who needs the room; the tooltip says why and that running a cell keeps it.
 */
export function IdleCountdown(props: {
  slice: ISlice;
  received: number;
  title: string;
  onClick: () => void;
}): JSX.Element {
  const { slice, received, title, onClick } = props;
  const { left, deadline } = useNoticeCountdown(slice.idle_notice, received);
  const why = slice.idle_notice
    ? idleNoticeDetails(slice, slice.idle_notice, deadline)
    : '';
  return (
    <button
      className="jp-vgpu-StatusItem-content jp-vgpu-mod-idle"
      title={`${why}\n${title}`}
      onClick={onClick}
    >
      <gpuIcon.react
        tag="span"
        elementSize="small"
        className="jp-vgpu-StatusItem-icon"
      />
      <span className="jp-vgpu-StatusItem-text">{statusIdleText(left)}</span>
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
          const simulated = this.model.simulated;
          if (slice.idle_notice) {
            return (
              <IdleCountdown
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
