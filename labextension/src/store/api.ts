/**
 * The REST contract of the jupyter-vgpu server extension (docs/rest.md), typed.
 *
 * The UI talks to nothing else: every number it shows comes from these replies.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IClusterReply, INodeHistoryReply } from './clustertypes';
import type { IHistoryReply } from './historytypes';
import type {
  IDevicesReply,
  IKeepReply,
  IKernelReply,
  IRefusal,
  ISlice,
  ISlicesChanges,
  ISlicesReply
} from './types';

export * from './types';
export * from './clustertypes';

/**
 * What `GET /api/vgpu/sample` is asked for. A time is the `since` of that part's history (null:
 * all of it); a part left undefined is not asked for.
 */
export interface ISampleQuery {
  /** The slices' (always there). */
  since: number | null;
  /** The GPUs. */
  devices?: number | null;
  /** The GPU dashboard's history. */
  history?: number | null;
  /** Kernels whose slices carry their host use. */
  hosts?: string[];
}

/**
 * `GET /api/vgpu/sample`: the other routes' replies, from one sample of the server; the slices
 * as `GET /api/vgpu/slices` answers the same `since` (whole without one, else the changes).
 */
export interface ISampleReply {
  slices: ISlicesChanges;
  /** When asked (`devices=`). */
  devices?: IDevicesReply;
  /** When asked (`history=`). */
  history?: IHistoryReply;
  /** Changes when a kernelspec is installed, removed or rewritten; absent on older servers. */
  kernelspecs?: string;
}

/**
 * A failed call, with the message the server gave when it gave one.
 *
 * `status` is 0 when the server could not be reached at all.
 */
export class VGPUApiError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

/** What a 404 without the server's own sentence says: no route there (an older server, or none). */
export const NOT_ENABLED =
  'The jupyter-vgpu server extension is not enabled on this server.';

/**
 * Call `/api/vgpu/<route>` under the server's base URL, with its auth.
 */
export async function requestAPI<T>(
  route: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'api', 'vgpu', route);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new VGPUApiError(
      `The Jupyter server could not be reached (${String(error)}).`,
      0
    );
  }
  const text = await response.text();
  let data: any = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const message =
      (data && typeof data.message === 'string' && data.message) ||
      (response.status === 404
        ? NOT_ENABLED
        : `The server answered ${response.status} ${response.statusText}.`);
    throw new VGPUApiError(message, response.status);
  }
  return data as T;
}

/** A `since` later than any history point: the reply carries no history. */
const NO_HISTORY = Number.MAX_SAFE_INTEGER;

/** `route?since=<time>`, or `route` when there is no time to pass. */
function withSince(route: string, since?: number | null): string {
  return since === undefined || since === null || !isFinite(since)
    ? route
    : `${route}?since=${encodeURIComponent(String(since))}`;
}

/** A time for the query: empty (every point) when there is none. */
function timeParameter(t: number | null): string {
  return t === null || !isFinite(t) ? '' : encodeURIComponent(String(t));
}

/** `GET /api/vgpu/sample`'s query: `sample?since=...&devices=...&history=...&host=...`. */
export function sampleRoute(query: ISampleQuery): string {
  const parts = [`since=${timeParameter(query.since)}`];
  if (query.devices !== undefined) {
    parts.push(`devices=${timeParameter(query.devices)}`);
  }
  if (query.history !== undefined) {
    parts.push(`history=${timeParameter(query.history)}`);
  }
  for (const id of query.hosts ?? []) {
    parts.push(`host=${encodeURIComponent(id)}`);
  }
  return `sample?${parts.join('&')}`;
}

/** `cluster/nodes/<hostname>/history?seconds=<seconds>`: a node's memory over time. */
export function nodeHistoryRoute(hostname: string, seconds: number): string {
  return `cluster/nodes/${encodeURIComponent(hostname)}/history?seconds=${encodeURIComponent(String(Math.round(seconds)))}`;
}

/** The calls the UI makes, bound to one server's settings. */
export class VGPUClient {
  constructor(readonly serverSettings: ServerConnection.ISettings) {}

  /** The GPUs; with `since`, only history points taken after it. */
  devices(since?: number | null): Promise<IDevicesReply> {
    return requestAPI<IDevicesReply>(
      withSince('devices', since),
      {},
      this.serverSettings
    );
  }

  /**
   * One sample for every view at once: the slices and, as asked, the GPUs, the dashboard's
   * history and kernels' host use (`GET /api/vgpu/sample`). With `since`, of each slice only
   * what changed after it (`mergeSlices` in model.ts).
   */
  sample(query: ISampleQuery): Promise<ISampleReply> {
    return requestAPI<ISampleReply>(
      sampleRoute(query),
      {},
      this.serverSettings
    );
  }

  /**
   * The cluster as the site's Prometheus sees it (`GET /api/vgpu/cluster`): every node, and this
   * user's slices on them. Fails with 404 when the server has no Prometheus to read, 503 when
   * Prometheus does not answer (the error's message is the server's sentence).
   */
  cluster(): Promise<IClusterReply> {
    return requestAPI<IClusterReply>('cluster', {}, this.serverSettings);
  }

  /** A node's memory over the last `seconds` (404: Prometheus never saw that node). */
  nodeHistory(hostname: string, seconds: number): Promise<INodeHistoryReply> {
    return requestAPI<INodeHistoryReply>(
      nodeHistoryRoute(hostname, seconds),
      {},
      this.serverSettings
    );
  }

  /** The slices and the line. */
  slices(): Promise<ISlicesReply>;
  /** With `since`, of each slice only what changed after it (`mergeSlices` in model.ts). */
  slices(since: number | null | undefined): Promise<ISlicesChanges>;
  slices(since?: number | null): Promise<ISlicesChanges> {
    return requestAPI<ISlicesChanges>(
      withSince('slices', since),
      {},
      this.serverSettings
    );
  }

  /**
   * The refusal a refused kernel start was answered with (its `refusal_id`); null when the
   * server has none of that id for this user (expired, or an older server).
   */
  async refusal(refusalId: string): Promise<IRefusal | null> {
    try {
      return await requestAPI<IRefusal>(
        `refusals/${encodeURIComponent(refusalId)}`,
        {},
        this.serverSettings
      );
    } catch (error) {
      if (error instanceof VGPUApiError && error.status === 404) {
        return null;
      }
      throw error;
    }
  }

  /** This user's refused kernel starts and ended kernels the server noted after `since`, newest first. */
  async refusals(since: number): Promise<IRefusal[]> {
    const reply = await requestAPI<{ refusals: IRefusal[] }>(
      withSince('refusals', since),
      {},
      this.serverSettings
    );
    return reply.refusals ?? [];
  }

  /** Take a request out of the line (its kernel start then fails with "Stopped waiting..."). */
  async cancelWaiting(ticket: number | string): Promise<void> {
    await requestAPI<unknown>(
      `waiting/${encodeURIComponent(String(ticket))}`,
      { method: 'DELETE' },
      this.serverSettings
    );
  }

  /**
   * The slice a kernel holds, or null (also null for a kernel the server does not know).
   * Without its history: a `since` after any point the server has (the status bar draws none).
   */
  async kernelSlice(kernelId: string): Promise<ISlice | null> {
    return (await this.kernel(kernelId))?.slice ?? null;
  }

  /**
   * What the server knows of a kernel: its slice and its use of the host; null for a kernel
   * the server does not know. Without the slice's history, as `kernelSlice`.
   */
  async kernel(kernelId: string): Promise<IKernelReply | null> {
    try {
      return await requestAPI<IKernelReply>(
        withSince(`kernels/${encodeURIComponent(kernelId)}`, NO_HISTORY),
        {},
        this.serverSettings
      );
    } catch (error) {
      if (error instanceof VGPUApiError && error.status === 404) {
        return null;
      }
      throw error;
    }
  }

  /**
   * The owner's "Keep it" for an idle slice: counts as activity (its idle time starts again)
   * and cancels a reclaim notice.
   */
  keep(sliceId: string): Promise<IKeepReply> {
    return requestAPI<IKeepReply>(
      `slices/${encodeURIComponent(sliceId)}/keep`,
      { method: 'POST', body: '{}' },
      this.serverSettings
    );
  }

  /** Release a slice held by a `jupyter vgpu run` command. */
  async release(sliceId: string): Promise<void> {
    await requestAPI<unknown>(
      `slices/${encodeURIComponent(sliceId)}`,
      { method: 'DELETE' },
      this.serverSettings
    );
  }
}
