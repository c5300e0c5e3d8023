/**
 * The sidebar's view of the server: devices and slices, refreshed by a backing-off poll.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  IDevicesReply,
  ISlice,
  ISlicesReply,
  VGPUApiError,
  VGPUClient
} from './api';

/** How many kernel colours the stylesheet defines (`--jp-vgpu-slice-color-<n>`). */
export const PALETTE_SIZE = 8;

/** The longest pause between two refreshes while the server keeps failing. */
const MAX_BACKOFF_MS = 60 * 1000;

export interface IGPUSnapshot {
  devices: IDevicesReply;
  slices: ISlicesReply;
  /** When this snapshot was taken (ms since the epoch). */
  taken: number;
}

/**
 * Polls `/api/vgpu/devices` and `/api/vgpu/slices` together so one refresh shows one moment.
 *
 * The poll stands by while `isVisible()` says nobody looks, and backs off (up to a minute)
 * while the server fails; `refresh()` asks for fresh data at once.
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
      name: 'jupyter-vgpu:sidebar',
      standby: () => (this._isVisible() ? 'when-hidden' : true)
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
      const [devices, slices] = await Promise.all([
        this.client.devices(),
        this.client.slices()
      ]);
      this._snapshot = { devices, slices, taken: Date.now() };
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

  private _forgetColours(live: ISlice[]): void {
    const ids = new Set(live.map(s => s.id));
    for (const id of Array.from(this._colours.keys())) {
      if (!ids.has(id)) {
        this._colours.delete(id);
      }
    }
  }

  private _changed = new Signal<this, void>(this);
  private _colours = new Map<string, number>();
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
    /** Whether anyone can see the data; the poll stands by when not. */
    isVisible?: () => boolean;
  }
}
