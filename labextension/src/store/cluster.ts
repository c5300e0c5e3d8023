/**
 * The cluster as the browser holds it: the latest `GET /api/vgpu/cluster` reply (every node, your
 * slices on them) and the memory history of the nodes a view looked at, read by the one store's
 * poll (GPUModel) every few seconds while a view shows the cluster.
 *
 * Its failures are its own: a server without a Prometheus (404) has no cluster, Prometheus down
 * (503) is one sentence, and neither touches the store's other parts, which read as before.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { NOT_ENABLED, VGPUApiError } from './api';
import type {
  IClusterReply,
  INodeHistoryPoint,
  INodeHistoryReply
} from './clustertypes';

/** How often the cluster is read while it shows (the server reads Prometheus at most every 2 s). */
export const CLUSTER_INTERVAL_MS = 5 * 1000;

/** The longest pause between two reads while the server fails to read Prometheus. */
const MAX_BACKOFF_MS = 60 * 1000;

/** A node's history covers this much (seconds): the dashboard's longest range. */
export const NODE_HISTORY_SECONDS = 3600;

/** The node history's `step` until the server has said. */
const DEFAULT_NODE_STEP = 15;

/**
 * What the browser knows of the cluster: `unread` before the first reply, `absent` when the
 * server has no cluster view (404: no Prometheus configured, or an older server), `shown` after a
 * good reply, `failed` while the server cannot read it (Prometheus down: 503).
 */
export type ClusterState = 'unread' | 'absent' | 'shown' | 'failed';

/** The calls the cluster needs (VGPUClient's). */
export interface IClusterClient {
  cluster(): Promise<IClusterReply>;
  nodeHistory(hostname: string, seconds: number): Promise<INodeHistoryReply>;
}

/** One node's history as held: the last good reply, or why there is none. */
export interface INodeHistoryState {
  hostname: string;
  /** The last good reply; kept under a later failure. */
  reply: INodeHistoryReply | null;
  /** Why the last read failed, one sentence; null after a good one. */
  error: string | null;
  /** When it was last read (ms, the browser's clock); 0 while the first read is on its way. */
  readAt: number;
}

/** What `read` is asked to do. */
export interface IClusterRead {
  /** The node whose history a view shows, if any. */
  node?: string | null;
  /** Read now, whatever the schedule says (and after a 404). */
  force?: boolean;
  /** Reads this many milliseconds early count as on time (half the poll's tick). */
  early?: number;
}

/** A node's history as points, one per time (arrays of unequal length are cut to the shortest). */
export function nodeHistoryPoints(
  reply: INodeHistoryReply | null | undefined
): INodeHistoryPoint[] {
  if (!reply || !Array.isArray(reply.t)) {
    return [];
  }
  const at = (values: (number | null)[] | undefined, i: number) => {
    const v = Array.isArray(values) ? values[i] : null;
    return typeof v === 'number' && isFinite(v) ? v : null;
  };
  const points: INodeHistoryPoint[] = [];
  reply.t.forEach((t, i) => {
    if (typeof t === 'number' && isFinite(t)) {
      points.push({
        t,
        total: at(reply.total, i),
        booked: at(reply.booked, i),
        used: at(reply.used, i),
        yours_booked: at(reply.yours_booked, i),
        yours_used: at(reply.yours_used, i)
      });
    }
  });
  return points;
}

/** A failure as the error a view shows: the server's sentence, or a sentence of ours. */
function asApiError(error: unknown): VGPUApiError {
  return error instanceof VGPUApiError
    ? error
    : new VGPUApiError(`The cluster could not be read (${String(error)}).`, 0);
}

/**
 * The cluster the browser holds; `read` asks the server when a read is due, one read at a time,
 * and `changed` emits after each.
 */
export class ClusterStore {
  /** Emits after every read, good or not. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get state(): ClusterState {
    return this._state;
  }

  /** The latest good reply (null before one, and after a 404). */
  get view(): IClusterReply | null {
    return this._view;
  }

  /** Why the latest read failed (the server's sentence on a 503); null after a good one. */
  get error(): VGPUApiError | null {
    return this._error;
  }

  /** When the cluster was last read, good or not (ms, the browser's clock); 0: never. */
  get readAt(): number {
    return this._readAt;
  }

  /** The history of `hostname` as held, if a view asked for it. */
  nodeHistory(hostname: string): INodeHistoryState | undefined {
    return this._histories.get(hostname);
  }

  /**
   * Whether a read of the cluster is due at `now` (ms): every `CLUSTER_INTERVAL_MS`, backing off
   * to a minute while the server fails; never after a 404, the server has no cluster view.
   */
  isDue(now: number, early = 0): boolean {
    if (this._state === 'absent') {
      return false;
    }
    const wait = Math.min(
      MAX_BACKOFF_MS,
      CLUSTER_INTERVAL_MS * 2 ** Math.min(this._failures, 4)
    );
    return now - this._readAt >= wait - early;
  }

  /**
   * Read the cluster when due (or forced), and the history of `node` when it is not held or older
   * than its step; each one read at a time (a read asked while one is on its way is dropped).
   * Never throws.
   */
  async read(
    client: IClusterClient,
    options: IClusterRead = {}
  ): Promise<void> {
    const now = Date.now();
    const early = options.early ?? 0;
    const node = options.node ?? null;
    const reads: Promise<void>[] = [];
    if (!this._reading && (options.force || this.isDue(now, early))) {
      reads.push(this._readCluster(client));
    }
    if (
      node !== null &&
      !this._historiesReading.has(node) &&
      (options.force || this._historyDue(node, now, early))
    ) {
      reads.push(this._readHistory(client, node));
    }
    await Promise.all(reads);
  }

  private async _readCluster(client: IClusterClient): Promise<void> {
    this._reading = true;
    try {
      const view = await client.cluster();
      this._view = view;
      this._error = null;
      this._state = 'shown';
      this._failures = 0;
    } catch (error) {
      const failure = asApiError(error);
      this._error = failure;
      if (failure.status === 404) {
        this._state = 'absent';
        this._view = null;
      } else {
        this._state = 'failed';
        this._failures++;
      }
    } finally {
      this._reading = false;
      this._readAt = Date.now();
      this._changed.emit();
    }
  }

  private _historyDue(hostname: string, now: number, early: number): boolean {
    const held = this._histories.get(hostname);
    if (!held) {
      return true;
    }
    const step = held.reply?.step;
    const seconds =
      typeof step === 'number' && step > 0 ? step : DEFAULT_NODE_STEP;
    const wait = Math.max(seconds * 1000, CLUSTER_INTERVAL_MS);
    return now - held.readAt >= wait - early;
  }

  private async _readHistory(
    client: IClusterClient,
    hostname: string
  ): Promise<void> {
    const held: INodeHistoryState = this._histories.get(hostname) ?? {
      hostname,
      reply: null,
      error: null,
      readAt: 0
    };
    this._histories.set(hostname, held);
    this._historiesReading.add(hostname);
    try {
      const reply = await client.nodeHistory(hostname, NODE_HISTORY_SECONDS);
      this._histories.set(hostname, {
        hostname,
        reply,
        error: null,
        readAt: Date.now()
      });
    } catch (error) {
      const failure = asApiError(error);
      this._histories.set(hostname, {
        ...held,
        // The server's sentence ("No node named ... has reported to Prometheus ..."), or ours
        // where a server without the route answered.
        error:
          failure.status === 404 && failure.message === NOT_ENABLED
            ? `This server cannot show ${hostname}'s history.`
            : failure.message,
        readAt: Date.now()
      });
    } finally {
      this._historiesReading.delete(hostname);
      this._changed.emit();
    }
  }

  private _changed = new Signal<this, void>(this);
  private _error: VGPUApiError | null = null;
  private _failures = 0;
  private _histories = new Map<string, INodeHistoryState>();
  private _historiesReading = new Set<string>();
  private _readAt = 0;
  private _reading = false;
  private _state: ClusterState = 'unread';
  private _view: IClusterReply | null = null;
}
