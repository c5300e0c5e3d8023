/**
 * The browser's view of the server: devices and slices, refreshed by a backing-off poll, and
 * the few minutes of history the server keeps, appended poll by poll (`?since=`). The slices
 * come as changes since the previous reply, merged into the whole.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  IDevicesReply,
  IHistoryPoint,
  ISlice,
  ISlicesChanges,
  ISlicesReply,
  VGPUApiError,
  VGPUClient
} from './api';

/** How many kernel colours the stylesheet defines (`--jp-vgpu-slice-color-<n>`). */
export const PALETTE_SIZE = 8;

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
 * Polls `/api/vgpu/slices` (and `/api/vgpu/devices` while the sidebar shows, so one refresh
 * shows one moment) with `?since=` the previous reply's `taken_at`, appends the history points
 * that come back and merges the slices' changes into the whole (`mergeSlices`), so its
 * snapshot holds what a whole reply says, each slice's `history` the points kept.
 *
 * The slices are polled while the sidebar is closed too, at the same pace: the line, the
 * watchdog's events and the status bar item need them. The poll stands by while the browser
 * tab is hidden and backs off (up to a minute) while the server fails; `refresh()` asks for
 * fresh data at once.
 */
export class GPUModel {
  constructor(options: GPUModel.IOptions) {
    this.client = options.client;
    this._isVisible = options.isVisible ?? (() => true);
    this._poll = new Poll({
      auto: false,
      factory: () => this._fetch(),
      frequency: {
        interval: options.interval,
        backoff: true,
        max: MAX_BACKOFF_MS
      },
      name: 'jupyter-vgpu:model',
      standby: 'when-hidden'
    });
  }

  readonly client: VGPUClient;

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

  /** Start polling (idempotent). */
  start(): void {
    void this._poll.start();
  }

  /** Refresh now, whatever the schedule says. */
  refresh(): Promise<void> {
    return this._poll.refresh();
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
   * The colour index of a slice: fixed the first time the slice is seen, and the least used
   * one among live slices then, so a kernel keeps its colour in the bar and in its row.
   */
  colour(sliceId: string): number {
    let colour = this._colours.get(sliceId);
    if (colour === undefined) {
      const counts = new Array<number>(PALETTE_SIZE).fill(0);
      this._colours.forEach(c => counts[c]++);
      colour = counts.indexOf(Math.min(...counts));
      this._colours.set(sliceId, colour);
    }
    return colour;
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _fetch(): Promise<void> {
    try {
      const withDevices =
        this._isVisible() || !this._snapshot || this._error !== null;
      const [devices, changes] = await Promise.all([
        withDevices
          ? this.client.devices(this._devicesSince)
          : Promise.resolve(this._snapshot!.devices),
        this.client.slices(this._slicesSince)
      ]);
      let slices = this._mergeSlices(changes);
      if (slices === null) {
        // A slice this model never saw, without its fields: start again from a whole reply.
        this._slicesSince = null;
        slices = await this.client.slices();
      }
      const taken = Date.now();
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
      this._snapshot = { devices, slices, taken };
      this._error = null;
      this._forgetColours(slices.slices);
    } catch (error) {
      this._error =
        error instanceof VGPUApiError
          ? error
          : new VGPUApiError(String(error), 0);
      throw error; // the poll backs off while this goes on
    } finally {
      this._loading = false;
      this._changed.emit();
    }
  }

  /**
   * The whole slices reply from `changes`: as it is when it answers no `since`, else merged
   * into the previous snapshot's (null: it cannot be, see `mergeSlices`).
   */
  private _mergeSlices(changes: ISlicesChanges): ISlicesReply | null {
    const previous = this._snapshot?.slices;
    return this._slicesSince === null || !previous
      ? (changes as ISlicesReply)
      : mergeSlices(previous, changes);
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

  private _forgetColours(live: ISlice[]): void {
    const ids = new Set(live.map(s => s.id));
    for (const id of Array.from(this._colours.keys())) {
      if (!ids.has(id)) {
        this._colours.delete(id);
      }
    }
  }

  private _changed = new Signal<this, void>(this);
  private _clockOffset = 0;
  private _colours = new Map<string, number>();
  private _deviceHistory = new Map<string, IHistoryPoint[]>();
  private _devicesSince: number | null = null;
  private _sliceHistory = new Map<string, IHistoryPoint[]>();
  private _slicesSince: number | null = null;
  private _error: VGPUApiError | null = null;
  private _isVisible: () => boolean;
  private _loading = true;
  private _poll: Poll;
  private _snapshot: IGPUSnapshot | null = null;
}

export namespace GPUModel {
  export interface IOptions {
    client: VGPUClient;
    /** Milliseconds between refreshes. */
    interval: number;
    /** Whether the sidebar shows; the GPUs are only asked for while it does. */
    isVisible?: () => boolean;
  }
}
