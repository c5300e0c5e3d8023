/**
 * The GPU dashboard's data: `GET /api/vgpu/history` (docs/rest.md), typed, and the history it
 * builds up in the browser reply by reply (`?since=` the previous reply's `taken_at`).
 */
import { ServerConnection } from '@jupyterlab/services';

import { requestAPI } from './api';
import type {
  IHistoryReply,
  IEndedSlice,
  IGPUHistory,
  ISliceHistory
} from './historytypes';

export * from './historytypes';

/** The default of the server's `step`, until it has said. */
export const DEFAULT_STEP = 10;
/** The default of the server's `seconds`, until it has said. */
export const DEFAULT_SECONDS = 3600;

/** `history`, or `history?since=<time>`. */
export function historyRoute(since?: number | null): string {
  return since === undefined || since === null || !isFinite(since)
    ? 'history'
    : `history?since=${encodeURIComponent(String(since))}`;
}

/** The calls of the dashboard, bound to one server's settings. */
export class HistoryClient {
  constructor(
    readonly serverSettings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ) {}

  /** The GPUs' and live slices' history; with `since`, only the points taken after it. */
  history(since?: number | null): Promise<IHistoryReply> {
    return requestAPI<IHistoryReply>(
      historyRoute(since),
      {},
      this.serverSettings
    );
  }
}

/**
 * `kept` and then the points of `fresh` later than its last one, less what is more than
 * `seconds` older than the newest point. Returns a new array.
 */
export function appendPoints<P extends { t: number }>(
  kept: P[] | undefined,
  fresh: P[] | undefined,
  seconds: number
): P[] {
  const out = kept ? kept.slice() : [];
  let last = out.length > 0 ? out[out.length - 1].t : -Infinity;
  for (const point of Array.isArray(fresh) ? fresh : []) {
    if (point && typeof point.t === 'number' && point.t > last) {
      out.push(point);
      last = point.t;
    }
  }
  if (out.length === 0 || !(seconds > 0)) {
    return out;
  }
  const oldest = last - seconds;
  let start = 0;
  while (start < out.length && out[start].t < oldest) {
    start++;
  }
  return start > 0 ? out.slice(start) : out;
}

/** Whether a slice is (or was) on a GPU: by uuid, or by index where the server sent no uuids. */
function isOn(
  slice: Pick<ISliceHistory, 'gpus' | 'gpu_indices'>,
  gpu: IGPUHistory
): boolean {
  return (slice.gpus ?? []).length > 0
    ? slice.gpus.includes(gpu.uuid)
    : (slice.gpu_indices ?? []).includes(gpu.index);
}

/**
 * The history the browser holds: each reply's points appended to what came before (up to the
 * server's `seconds`), GPUs and slices the reply no longer lists dropped.
 */
export class HistoryStore {
  /** The `since` for the next request: the last reply's `taken_at` (null before the first). */
  get since(): number | null {
    return this._since;
  }

  /** The last reply, its points as sent (null before the first). */
  get latest(): IHistoryReply | null {
    return this._latest;
  }

  /** The GPUs in index order, each with all the points kept. */
  get gpus(): IGPUHistory[] {
    return Array.from(this._gpus.values()).sort((a, b) => a.index - b.index);
  }

  /** The live slices, in the server's order, each with all the points kept. */
  get slices(): ISliceHistory[] {
    return Array.from(this._slices.values());
  }

  /** Seconds between two points (the server's `step`). */
  get step(): number {
    const step = this._latest?.step;
    return typeof step === 'number' && step > 0 ? step : DEFAULT_STEP;
  }

  /** How much history is kept (the server's `seconds`). */
  get seconds(): number {
    const seconds = this._latest?.seconds;
    return typeof seconds === 'number' && seconds > 0
      ? seconds
      : DEFAULT_SECONDS;
  }

  /** The slices that ended within the history, oldest first. */
  get ended(): IEndedSlice[] {
    const ended = this._latest?.ended;
    return Array.isArray(ended) ? ended : [];
  }

  /** The slices on the GPU `uuid`. */
  slicesOn(gpu: IGPUHistory): ISliceHistory[] {
    return this.slices.filter(s => isOn(s, gpu));
  }

  /** The slices that ended on the GPU `uuid`. */
  endedOn(gpu: IGPUHistory): IEndedSlice[] {
    return this.ended.filter(s => isOn(s, gpu));
  }

  /** Take in a reply: append its points, forget what it no longer lists. */
  apply(reply: IHistoryReply): void {
    // Without a `taken_at` the server cannot be asked for what follows: take the reply whole.
    const incremental =
      typeof reply.taken_at === 'number' && isFinite(reply.taken_at);
    const seconds =
      typeof reply.seconds === 'number' && reply.seconds > 0
        ? reply.seconds
        : DEFAULT_SECONDS;
    const gpus = new Map<string, IGPUHistory>();
    for (const gpu of Array.isArray(reply.gpus) ? reply.gpus : []) {
      const kept = incremental ? this._gpus.get(gpu.uuid)?.points : undefined;
      gpus.set(gpu.uuid, {
        ...gpu,
        points: appendPoints(kept, gpu.points, seconds)
      });
    }
    const slices = new Map<string, ISliceHistory>();
    for (const slice of Array.isArray(reply.slices) ? reply.slices : []) {
      const kept = incremental ? this._slices.get(slice.id)?.points : undefined;
      slices.set(slice.id, {
        ...slice,
        points: appendPoints(kept, slice.points, seconds)
      });
    }
    this._gpus = gpus;
    this._slices = slices;
    this._latest = reply;
    this._since = incremental ? reply.taken_at : null;
  }

  private _gpus = new Map<string, IGPUHistory>();
  private _latest: IHistoryReply | null = null;
  private _since: number | null = null;
  private _slices = new Map<string, ISliceHistory>();
}
