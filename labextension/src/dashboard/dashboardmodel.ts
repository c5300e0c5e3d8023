/**
 * The GPU dashboard's data: the hour of history the one store (GPUModel) reads once a step
 * (`GET /api/vgpu/history`, its points appended reply by reply) while the dashboard shows.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { VGPUApiError } from '../store/api';
import { HistoryStore } from '../store/historyapi';
import { GPUModel } from '../store/model';

/**
 * The dashboard's view of the store: it asks for the history while the dashboard shows (the
 * store's poll then reads it every `step` seconds, the server's, backing off while the server
 * fails) and passes on each read; the last good history is kept under the error.
 */
export class DashboardModel {
  constructor(options: DashboardModel.IOptions) {
    this._model = options.model;
    const isVisible = options.isVisible ?? (() => true);
    this._unsubscribe = this._model.subscribe(() =>
      isVisible() ? { history: true } : null
    );
    this._model.historyChanged.connect(this._onHistory, this);
  }

  /** The history read so far. */
  get store(): HistoryStore {
    return this._model.history;
  }

  /** A slice's colour, as the sidebar draws it. */
  colour(sliceId: string): number {
    return this._model.colour(sliceId);
  }

  /** Emits after every read of the history, successful or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The latest failure of the store's poll; null once a read succeeds again. */
  get error(): VGPUApiError | null {
    return this._model.error;
  }

  /** True until the history has been read once. */
  get loading(): boolean {
    return this._model.historyLoading;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Start the store's poll (idempotent), and read the history now if it never was. */
  start(): void {
    this._model.start();
    if (this.loading) {
      void this.refresh();
    }
  }

  /** Read the history now. */
  refresh(): Promise<void> {
    return this._model.refresh({ history: true });
  }

  /** Read it now when the last read is older than a step (the dashboard shows again). */
  refreshIfStale(): void {
    this._model.refreshHistoryIfStale();
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._unsubscribe();
    this._model.historyChanged.disconnect(this._onHistory, this);
    Signal.clearData(this);
  }

  private _onHistory(): void {
    this._changed.emit();
  }

  private _changed = new Signal<this, void>(this);
  private _isDisposed = false;
  private _model: GPUModel;
  private _unsubscribe: () => void;
}

export namespace DashboardModel {
  export interface IOptions {
    /** The store the other views read too. */
    model: GPUModel;
    /** Whether the dashboard shows; the history is read only while it does. */
    isVisible?: () => boolean;
  }
}
