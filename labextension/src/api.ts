/**
 * The REST contract of the jupyter-vgpu server extension (docs/rest.md), typed.
 *
 * The UI talks to nothing else: every number it shows comes from these replies.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * What holds a slice. The server's `HolderKind` (jupyter_vgpu/slices/records.py) lists the same
 * values; tests/test_contract.py checks that the two agree.
 */
export type HolderKind = 'kernel' | 'command';

/** One GPU, as `GET /api/vgpu/devices` describes it (the GPU fields of docs/rest.md). */
export interface IDevice {
  index: number;
  uuid: string;
  name: string;
  memory_total: number;
  memory_used: number | null;
  /** What the slices reserve here. */
  memory_reserved: number;
  /** What the slices' processes use here. */
  memory_used_by_slices: number;
  /** What slices use beyond their reservations. */
  memory_over_use: number;
  /** What is used outside slices (processes without a slice, memory no process accounts for). */
  memory_foreign: number;
  /** What one new slice could get here now: the same figure as `jupyter vgpu status`. */
  memory_free: number;
  utilization: number | null;
  utilization_history: [number, number | null][];
  mig_mode: boolean;
  tier: string;
  slices: string[];
}

export interface IDevicesReply {
  simulated: boolean;
  available: boolean;
  message: string | null;
  driver: string;
  interval: number;
  devices: IDevice[];
}

/** The state of a slice's usage against its reservation, decided by the server. */
export type SliceState = 'ok' | 'near' | 'over' | 'unknown';

/** One reservation: a kernel's or a `jupyter vgpu run` command's. */
export interface ISlice {
  id: string;
  holder_kind: HolderKind;
  /** The slice belongs to the user this server runs as (others' come from a node broker). */
  yours: boolean;
  /** A kernel of this very server (only those can be shut down from here). */
  running_here: boolean;
  kernel_id: string | null;
  kernel_name: string | null;
  kernel_display_name: string | null;
  path: string | null;
  command: string | string[] | null;
  owner: string | null;
  pid: number | null;
  gpus: string[];
  gpu_indices: number[];
  fraction: number | null;
  request_text: string;
  memory_reserved: number;
  context_allowance: number;
  memory_limit: number;
  memory_used: number | null;
  /** Measured memory per GPU uuid (absent or null when not measured per GPU). */
  memory_used_by_gpu?: { [uuid: string]: number | null } | null;
  utilization: number | null;
  usage_source: 'measured' | 'reported' | 'none';
  tier: string;
  state: SliceState;
  frameworks?: { [name: string]: { status: string; detail?: string } };
  history?: { t: number; used: number | null; util: number | null }[];
  watchdog?: {
    action: string;
    events: { t: number; action: string; message: string }[];
  };
  created: number;
}

/** A request waiting in line for a slice. */
export interface IWaiting {
  ticket: number;
  position: number;
  holder_kind: HolderKind;
  holder: string;
  request_text: string;
  waiting_seconds: number;
  labels: { [key: string]: string };
}

export interface ISlicesReply {
  simulated: boolean;
  interval: number;
  slices: ISlice[];
  waiting: IWaiting[];
}

export interface IKernelReply {
  kernel_id: string;
  slice: ISlice | null;
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
        ? 'The jupyter-vgpu server extension is not enabled on this server.'
        : `The server answered ${response.status} ${response.statusText}.`);
    throw new VGPUApiError(message, response.status);
  }
  return data as T;
}

/** The three reads the UI needs, bound to one server's settings. */
export class VGPUClient {
  constructor(readonly serverSettings: ServerConnection.ISettings) {}

  devices(): Promise<IDevicesReply> {
    return requestAPI<IDevicesReply>('devices', {}, this.serverSettings);
  }

  slices(): Promise<ISlicesReply> {
    return requestAPI<ISlicesReply>('slices', {}, this.serverSettings);
  }

  /** The slice a kernel holds, or null (also null for a kernel the server does not know). */
  async kernelSlice(kernelId: string): Promise<ISlice | null> {
    try {
      const reply = await requestAPI<IKernelReply>(
        `kernels/${encodeURIComponent(kernelId)}`,
        {},
        this.serverSettings
      );
      return reply.slice;
    } catch (error) {
      if (error instanceof VGPUApiError && error.status === 404) {
        return null;
      }
      throw error;
    }
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
