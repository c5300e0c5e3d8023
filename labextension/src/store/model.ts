/**
 * The browser's view of the server, one store for every view: devices and slices, refreshed by
 * one backing-off poll, with the few minutes of history the server keeps appended poll by poll
 * (`?since=`), the slices' changes since the previous reply merged into the whole, the GPU
 * dashboard's hour of history read in the same poll once a step, and the cluster (a site's
 * Prometheus, through the server) every few seconds while the dashboard shows it.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  IDevicesReply,
  IHistoryPoint,
  ISampleQuery,
  ISlice,
  ISlicesChanges,
  ISlicesReply,
  VGPUApiError,
  VGPUClient
} from './api';
import { ClusterStore } from './cluster';
import { PALETTE_SIZE, SliceColours } from './colours';
import { HistoryStore } from './historyapi';

export { PALETTE_SIZE };

/** The longest pause between two refreshes while the server keeps failing. */
const MAX_BACKOFF_MS = 60 * 1000;

/** How much history the charts show (the server keeps about as much: `history_seconds`). */
export const HISTORY_SECONDS = 300;

/** At most this many points per slice or GPU (the server keeps 60 by default). */
const MAX_POINTS = 240;

/**
 * Append `fresh` to `kept` (points after its last one only), then drop what is older than
 * `HISTORY_SECONDS` before the newest point.
 */
export function appendHistory(
  kept: IHistoryPoint[] | undefined,
  fresh: IHistoryPoint[] | undefined
): IHistoryPoint[] {
  const out = kept ? kept.slice() : [];
  const last = out.length > 0 ? out[out.length - 1].t : -Infinity;
  for (const point of fresh ?? []) {
    if (point && typeof point.t === 'number' && point.t > last) {
      out.push(point);
    }
  }
  if (out.length === 0) {
    return out;
  }
  const oldest = out[out.length - 1].t - HISTORY_SECONDS;
  let start = 0;
  while (start < out.length && out[start].t < oldest) {
    start++;
  }
  return out.slice(Math.max(start, out.length - MAX_POINTS));
}

/** At most this many kernels' host use is asked for in one poll (the server's bound). */
const MAX_HOSTS = 8;

/**
 * What a view needs from the store while it shows. Every poll reads the slices (and the line);
 * the rest only while some view needs it.
 */
export interface ISampleNeeds {
  /** The GPUs too: the sidebar. */
  devices?: boolean;
  /** The GPU dashboard's hour of history, read once a step: the dashboard. */
  history?: boolean;
  /** The kernel whose host use (CPU, RAM) its slice carries: the status bar's. */
  host?: string | null;
  /** The cluster, every few seconds: the dashboard's cluster section. */
  cluster?: boolean;
  /** The node whose memory history the cluster section shows. */
  clusterNode?: string | null;
}

/**
 * A view that reads the store: what it needs now, or null while it needs nothing (hidden, or
 * following no kernel). The poll stands by while no subscriber needs anything.
 */
export type SampleSubscriber = () => ISampleNeeds | null;

/**
 * The whole slices reply again from the previous one and a `?since=` reply (docs/rest.md): each
 * slice's changed fields over those kept from before, in the order of `changes` (a slice it
 * leaves out has ended), and the top-level fields it leaves out (`watchdog`) kept. A slice's
 * `history` is left as `changes` has it (new points only: the model appends them). Null when
 * `changes` names a slice `previous` does not hold without giving its fields: nothing to make
 * it from, so the caller asks for a whole reply.
 */
export function mergeSlices(
  previous: ISlicesReply,
  changes: ISlicesChanges
): ISlicesReply | null {
  const kept = new Map(previous.slices.map(s => [s.id, s] as const));
  const slices: ISlice[] = [];
  for (const changed of changes.slices) {
    const before = kept.get(changed.id);
    if (before === undefined && changed.holder_kind === undefined) {
      return null;
    }
    slices.push({ ...before, ...changed } as ISlice);
  }
  return { ...previous, ...changes, slices };
}

export interface IGPUSnapshot {
  devices: IDevicesReply;
  slices: ISlicesReply;
  /** When this snapshot was taken (ms since the epoch). */
  taken: number;
}

/**
 * The one store the sidebar, the status bar, the GPU dashboard and the notifications read: a
 * single poll whose every tick is one request, `GET /api/vgpu/sample`, for what its subscribers
 * need from one sample of the server.
 *
 * Each tick reads the slices and the line (with the host use of the kernel the status bar
 * follows), the GPUs while the sidebar shows and, while the dashboard shows, the dashboard's
 * history once every `step` seconds (the server's). Each part is asked with a `since` of its
 * previous reply's `taken_at`, and the history points that come back are appended. The poll
 * stands by while no subscriber needs anything and while the browser tab is hidden, and backs
 * off (up to a minute) while the server fails; `refresh()` asks at once.
 */
export class GPUModel {
  constructor(options: GPUModel.IOptions) {
    this.client = options.client;
    this._poll = new Poll({
      auto: false,
      factory: () => this._tick(),
      frequency: {
        interval: options.interval,
        backoff: true,
        max: MAX_BACKOFF_MS
      },
      name: 'jupyter-vgpu:model',
      standby: () => (this._needs() === null ? true : 'when-hidden')
    });
  }

  readonly client: VGPUClient;

  /** The GPU dashboard's history: an hour of each GPU's and live slice's figures. */
  readonly history = new HistoryStore();

  /**
   * The cluster as the site's Prometheus sees it (`GET /api/vgpu/cluster`), read beside the
   * tick's sample while a view needs it: its own request, its own failures (the rest of the
   * store reads as before while Prometheus is down), its own `changed`.
   */
  readonly cluster = new ClusterStore();

  /** Emits after every refresh, successful or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The latest good data (kept while the server fails, so the view does not flicker). */
  get snapshot(): IGPUSnapshot | null {
    return this._snapshot;
  }

  /** The latest failure, or null once a refresh succeeds again. */
  get error(): VGPUApiError | null {
    return this._error;
  }

  /** True until the first refresh has finished. */
  get loading(): boolean {
    return this._loading;
  }

  /** Milliseconds between refreshes while all is well. */
  get interval(): number {
    return this._poll.frequency.interval;
  }
  set interval(ms: number) {
    this._poll.frequency = { ...this._poll.frequency, interval: ms };
  }

  /** Emits after every read of the dashboard's history, successful or not. */
  get historyChanged(): ISignal<this, void> {
    return this._historyChanged;
  }

  /** True until the dashboard's history has been read once. */
  get historyLoading(): boolean {
    return this._historyFetched === 0;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /**
   * Read the store while `subscriber` says it needs something; returns the function that ends
   * the subscription. A new need is met at the next tick (or call `refresh()`).
   */
  subscribe(subscriber: SampleSubscriber): () => void {
    this._subscribers.add(subscriber);
    return () => {
      this._subscribers.delete(subscriber);
    };
  }

  /** Start polling (idempotent). */
  start(): void {
    void this._poll.start();
  }

  /**
   * Refresh now, whatever the schedule says; with `history`, the dashboard's history too; with
   * `cluster`, the cluster (even after the server said it has none).
   */
  refresh(
    options: { history?: boolean; cluster?: boolean } = {}
  ): Promise<void> {
    if (options.history) {
      this._historyForced = true;
    }
    if (options.cluster) {
      this._clusterForced = true;
    }
    return this._poll.refresh();
  }

  /** Refresh the dashboard's history now when it is older than a step (the dashboard shows again). */
  refreshHistoryIfStale(): void {
    if (
      this._historyFetched > 0 &&
      Date.now() - this._historyFetched >= this.history.step * 1000
    ) {
      void this.refresh({ history: true });
    }
  }

  /** The slice a kernel holds in the latest snapshot, or null. */
  kernelSlice(kernelId: string): ISlice | null {
    return (
      this._snapshot?.slices.slices.find(s => s.kernel_id === kernelId) ?? null
    );
  }

  /** The slice with this id in the latest snapshot. */
  slice(id: string): ISlice | undefined {
    return this._snapshot?.slices.slices.find(s => s.id === id);
  }

  /** A slice's memory and utilisation over the last few minutes, oldest first. */
  sliceHistory(sliceId: string): IHistoryPoint[] {
    return this._sliceHistory.get(sliceId) ?? [];
  }

  /** A GPU's memory and utilisation over the last few minutes, oldest first. */
  deviceHistory(uuid: string): IHistoryPoint[] {
    return this._deviceHistory.get(uuid) ?? [];
  }

  /**
   * Now on the server's clock (seconds since the epoch), estimated from the latest reply's
   * `taken_at`; the browser's clock until the server has said.
   */
  serverNow(): number {
    return (Date.now() + this._clockOffset) / 1000;
  }

  /**
   * The colour index of a slice: the one its id asks for unless an older live slice has it
   * (`SliceColours`), so a kernel has the same colour in the bar, in its row, on the dashboard
   * and after a reload.
   */
  colour(sliceId: string): number {
    return this._colours.colour(sliceId);
  }

  /**
   * A word from the server that changes when a kernelspec is installed, removed or rewritten
   * (null until it has said): JupyterLab then reads the kernelspecs again.
   */
  get kernelspecs(): string | null {
    return this._kernelspecs;
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  /** What the subscribers need now, together; null when none needs anything. */
  private _needs(): {
    devices: boolean;
    history: boolean;
    hosts: string[];
    cluster: boolean;
    clusterNode: string | null;
  } | null {
    let any = false;
    const needs = {
      devices: false,
      history: false,
      hosts: [] as string[],
      cluster: false,
      clusterNode: null as string | null
    };
    this._subscribers.forEach(subscriber => {
      const one = subscriber();
      if (!one) {
        return;
      }
      any = true;
      needs.devices = needs.devices || !!one.devices;
      needs.history = needs.history || !!one.history;
      if (one.host && !needs.hosts.includes(one.host)) {
        needs.hosts.push(one.host);
      }
      needs.cluster = needs.cluster || !!one.cluster;
      needs.clusterNode = needs.clusterNode ?? one.clusterNode ?? null;
    });
    return any || this._historyForced || this._clusterForced ? needs : null;
  }

  /** One tick: one request for what the subscribers need now. */
  private async _tick(): Promise<void> {
    const needs = this._needs() ?? {
      devices: false,
      history: false,
      hosts: [],
      cluster: false,
      clusterNode: null
    };
    if (needs.cluster || this._clusterForced) {
      // Beside the sample, not awaited: a slow Prometheus never holds up the other views.
      void this.cluster.read(this.client, {
        node: needs.clusterNode,
        force: this._clusterForced,
        early: this.interval / 2
      });
      this._clusterForced = false;
    }
    const withDevices =
      needs.devices || !this._snapshot || this._error !== null;
    const withHistory =
      this._historyForced || (needs.history && this._historyDue());
    this._historyForced = false;
    try {
      const query: ISampleQuery = {
        since: this._slicesSince,
        devices: withDevices ? this._devicesSince : undefined,
        history: withHistory ? this.history.since : undefined,
        hosts: needs.hosts.slice(0, MAX_HOSTS)
      };
      let reply = await this.client.sample(query);
      let slices = reply.slices ? this._mergeSlices(reply.slices) : undefined;
      if (slices === null) {
        // A slice this store never saw, without its fields: ask again for a whole reply.
        this._slicesSince = null;
        reply = await this.client.sample({ ...query, since: null });
        slices = reply.slices as ISlicesReply;
      }
      const taken = Date.now();
      const devices = withDevices ? reply.devices : this._snapshot?.devices;
      if (!slices || !devices) {
        throw new VGPUApiError(
          'The server answered without the slices or the GPUs.',
          0
        );
      }
      if (withDevices) {
        this._devicesSince = this._appendAll(
          this._deviceHistory,
          devices.devices.map(d => [d.uuid, d.history] as const),
          devices.taken_at
        );
      }
      this._slicesSince = this._appendAll(
        this._sliceHistory,
        slices.slices.map(s => [s.id, s.history] as const),
        slices.taken_at
      );
      slices = {
        ...slices,
        slices: slices.slices.map(s => ({
          ...s,
          history: this.sliceHistory(s.id)
        }))
      };
      if (typeof slices.taken_at === 'number') {
        this._clockOffset = slices.taken_at * 1000 - taken;
      }
      if (withHistory && reply.history) {
        this.history.apply(reply.history);
      }
      this._snapshot = { devices, slices, taken };
      this._error = null;
      this._colours.assign(slices.slices);
      if (typeof reply.kernelspecs === 'string') {
        this._kernelspecs = reply.kernelspecs;
      }
    } catch (error) {
      this._error =
        error instanceof VGPUApiError
          ? error
          : new VGPUApiError(String(error), 0);
      throw error; // the poll backs off while this goes on
    } finally {
      this._loading = false;
      this._changed.emit();
      if (withHistory) {
        this._historyFetched = Date.now();
        this._historyChanged.emit();
      }
    }
  }

  /** Whether a step has passed since the dashboard's history was read. */
  private _historyDue(): boolean {
    // Ticks do not fall exactly a step apart: half a tick early is on time.
    const wait = this.history.step * 1000 - this.interval / 2;
    return Date.now() - this._historyFetched >= wait;
  }

  /**
   * The whole slices reply from `changes`: as it is when it answers no `since`, else merged
   * into the previous snapshot's (null: it cannot be, see `mergeSlices`).
   */
  private _mergeSlices(changes: ISlicesChanges): ISlicesReply | null {
    const previous = this._snapshot?.slices;
    if (this._slicesSince === null || !previous) {
      return changes as ISlicesReply;
    }
    // A slice's `host` is each reply's own (there while a view follows its kernel), not one of
    // the fields the changes leave out when they stay the same: never keep it from before.
    const slices = previous.slices.map(s => {
      const copy = { ...s };
      delete copy.host;
      return copy;
    });
    return mergeSlices({ ...previous, slices }, changes);
  }

  /**
   * Append each key's fresh points to `store` (or replace them all when the server sent no
   * `taken_at`, so its history is whole each time) and forget keys that are gone. Returns the
   * `since` for the next request.
   */
  private _appendAll(
    store: Map<string, IHistoryPoint[]>,
    fresh: ReadonlyArray<readonly [string, IHistoryPoint[] | undefined]>,
    takenAt: number | undefined
  ): number | null {
    const incremental = typeof takenAt === 'number';
    const live = new Set<string>();
    for (const [key, points] of fresh) {
      live.add(key);
      store.set(
        key,
        appendHistory(incremental ? store.get(key) : undefined, points)
      );
    }
    for (const key of Array.from(store.keys())) {
      if (!live.has(key)) {
        store.delete(key);
      }
    }
    return incremental ? takenAt! : null;
  }

  private _changed = new Signal<this, void>(this);
  private _historyChanged = new Signal<this, void>(this);
  private _historyFetched = 0;
  private _historyForced = false;
  private _clusterForced = false;
  private _subscribers = new Set<SampleSubscriber>();
  private _clockOffset = 0;
  private _colours = new SliceColours();
  private _kernelspecs: string | null = null;
  private _deviceHistory = new Map<string, IHistoryPoint[]>();
  private _devicesSince: number | null = null;
  private _sliceHistory = new Map<string, IHistoryPoint[]>();
  private _slicesSince: number | null = null;
  private _error: VGPUApiError | null = null;
  private _loading = true;
  private _poll: Poll;
  private _snapshot: IGPUSnapshot | null = null;
}

export namespace GPUModel {
  export interface IOptions {
    client: VGPUClient;
    /** Milliseconds between refreshes. */
    interval: number;
  }
}
