/**
 * The dashboard's cluster section's data: the one store's cluster (GPUModel.cluster), read every
 * few seconds while the dashboard shows, and the node the user picked, whose memory history is
 * read with it.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { ClusterStore, INodeHistoryState } from '../store/cluster';
import { GPUModel } from '../store/model';

/**
 * The cluster section's view of the store: it asks for the cluster (and the picked node's
 * history) while the dashboard shows, and passes on each read.
 */
export class ClusterModel {
  constructor(options: ClusterModel.IOptions) {
    this._model = options.model;
    const isVisible = options.isVisible ?? (() => true);
    this._unsubscribe = this._model.subscribe(() =>
      isVisible() ? { cluster: true, clusterNode: this._selected } : null
    );
    this._model.cluster.changed.connect(this._onChanged, this);
  }

  /** The cluster as read so far. */
  get store(): ClusterStore {
    return this._model.cluster;
  }

  /** Emits after every read of the cluster or of a node's history, and when a node is picked. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The node whose history shows, or null. */
  get selected(): string | null {
    return this._selected;
  }

  /** The picked node's history as held (undefined until its first read ends). */
  get selectedHistory(): INodeHistoryState | undefined {
    return this._selected === null
      ? undefined
      : this._model.cluster.nodeHistory(this._selected);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Show `hostname`'s history (read now), or none (null, or the node already shown). */
  select(hostname: string | null): void {
    this._selected = hostname === this._selected ? null : hostname;
    this._changed.emit();
    if (this._selected !== null) {
      void this._model.refresh();
    }
  }

  /** Read the cluster now (also after the server said it has none: the Refresh button). */
  refresh(): Promise<void> {
    return this._model.refresh({ cluster: true });
  }

  /** Read it now when a read is due (the dashboard shows again); the first read at once. */
  refreshIfStale(): void {
    if (this.store.isDue(Date.now())) {
      void this._model.refresh();
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._unsubscribe();
    this._model.cluster.changed.disconnect(this._onChanged, this);
    Signal.clearData(this);
  }

  private _onChanged(): void {
    this._changed.emit();
  }

  private _changed = new Signal<this, void>(this);
  private _isDisposed = false;
  private _model: GPUModel;
  private _selected: string | null = null;
  private _unsubscribe: () => void;
}

export namespace ClusterModel {
  export interface IOptions {
    /** The store the other views read too. */
    model: GPUModel;
    /** Whether the dashboard shows; the cluster is read only while it does. */
    isVisible?: () => boolean;
  }
}
