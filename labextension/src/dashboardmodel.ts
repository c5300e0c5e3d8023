/**
 * The GPU dashboard's data: a poll of `GET /api/vgpu/history` every `step` seconds (the server's),
 * its points appended reply by reply (`?since=`) in a HistoryStore.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { VGPUApiError } from './api';
import { HistoryStore, IHistoryReply } from './historyapi';

/** The longest pause between two polls while the server keeps failing. */
const MAX_BACKOFF_MS = 60 * 1000;

/** Where the history comes from (a `HistoryClient`, or a fake in tests). */
export interface IHistorySourceClient {
  history(since?: number | null): Promise<IHistoryReply>;
}

/**
 * The dashboard's data: a poll of `GET /api/vgpu/history` every `step` seconds (the server's),
 * standing by while the dashboard is hidden, backing off while the server fails; the last good
 * history is kept under the error.
 */
export class DashboardModel {
  constructor(options: DashboardModel.IOptions) {
    this._client = options.client;
    const isVisible = options.isVisible ?? (() => true);
    this._poll = new Poll({
      auto: false,
      factory: () => this._fetch(),
      frequency: {
        interval: this.store.step * 1000,
        backoff: true,
        max: MAX_BACKOFF_MS
      },
      name: 'jupyter-vgpu:dashboard',
      // Asleep in a background tab and while the browser tab is hidden.
      standby: () => (isVisible() ? 'when-hidden' : true)
    });
  }

  readonly store = new HistoryStore();

  /** Emits after every poll, successful or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The latest failure; null once a poll succeeds again. */
  get error(): VGPUApiError | null {
    return this._error;
  }

  /** True until the first poll has finished. */
  get loading(): boolean {
    return this._loading;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Start polling (idempotent). */
  start(): void {
    void this._poll.start();
  }

  /** Poll now. */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  /** Poll now when the last poll is older than a step (the dashboard shows again). */
  refreshIfStale(): void {
    if (
      this._fetched > 0 &&
      Date.now() - this._fetched >= this.store.step * 1000
    ) {
      void this.refresh();
    }
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _fetch(): Promise<void> {
    try {
      const reply = await this._client.history(this.store.since);
      this.store.apply(reply);
      this._error = null;
      const interval = Math.max(1000, this.store.step * 1000);
      if (interval !== this._poll.frequency.interval) {
        this._poll.frequency = {
          ...this._poll.frequency,
          interval,
          max: Math.max(MAX_BACKOFF_MS, interval)
        };
      }
    } catch (error) {
      this._error =
        error instanceof VGPUApiError
          ? error
          : new VGPUApiError(String(error), 0);
      throw error; // the poll backs off while this goes on
    } finally {
      this._fetched = Date.now();
      this._loading = false;
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _client: IHistorySourceClient;
  private _error: VGPUApiError | null = null;
  private _fetched = 0;
  private _loading = true;
  private _poll: Poll;
}

export namespace DashboardModel {
  export interface IOptions {
    client: IHistorySourceClient;
    /** Whether the dashboard shows; the poll stands by while it does not. */
    isVisible?: () => boolean;
  }
}
