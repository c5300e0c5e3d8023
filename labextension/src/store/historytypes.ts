/**
 * The GPU dashboard's history as `GET /api/vgpu/history` answers it (docs/rest.md), typed.
 */
import type { HolderKind, IGateway } from './types';

/** One sample of a GPU, every `step` seconds. */
export interface IGPUHistoryPoint {
  t: number;
  /** Memory used by all processes (bytes). */
  used: number | null;
  /** Memory the slices on this GPU reserve (bytes). */
  reserved: number;
  /** Utilisation (%). */
  util: number | null;
  /** Power draw (W). */
  power: number | null;
  /** Temperature (°C). */
  temp: number | null;
  /** PCIe throughput (bytes/s), sent and received. */
  pcie_tx: number | null;
  pcie_rx: number | null;
}

/** One GPU and its samples (those after the request's `since`). */
export interface IGPUHistory {
  uuid: string;
  index: number;
  name: string;
  memory_total: number;
  /** The board's power limit (W), when NVML says. */
  power_limit: number | null;
  points: IGPUHistoryPoint[];
}

/** One sample of a slice. */
export interface ISliceHistoryPoint {
  t: number;
  used: number | null;
  util: number | null;
}

/** A live slice and its samples (those after the request's `since`). */
export interface ISliceHistory {
  id: string;
  holder_kind: HolderKind;
  kernel_id: string | null;
  path: string | null;
  command: string | string[] | null;
  kernel_display_name: string | null;
  request_text: string;
  gpus: string[];
  gpu_indices: number[];
  /** What the slice reserves on all its GPUs (bytes): an elastic slice's request. */
  memory_reserved_total: number;
  /**
   * An elastic slice's limit on all its GPUs (bytes), what it may burst to; null for a fixed
   * slice, absent on older servers.
   */
  memory_limit_total?: number | null;
  yours: boolean;
  /** When it was reserved (the server's clock); absent on older servers. */
  created?: number;
  points: ISliceHistoryPoint[];
}

/** A slice that ended within the history (`ended` of the reply): no chart, an event. */
export interface IEndedSlice extends Omit<ISliceHistory, 'points'> {
  created: number;
  /** The last sample that listed it. */
  last_seen: number;
  /** The first sample that did not: it ended between the two. */
  ended: number;
  /** The most memory it was seen using (null: never known). */
  memory_peak: number | null;
}

/** `GET /api/vgpu/history`. */
export interface IHistoryReply {
  simulated: boolean;
  available: boolean;
  message: string | null;
  /** When the reply's latest sample was taken (the server's clock): the next `since`. */
  taken_at: number;
  /** Seconds between two points. */
  step: number;
  /** How much history the server keeps (seconds). */
  seconds: number;
  gpus: IGPUHistory[];
  slices: ISliceHistory[];
  /** The slices that ended within `seconds`, whole in every reply; absent on older servers. */
  ended?: IEndedSlice[];
  /** Present when the server answers from a GPU node behind `--gateway-url`. */
  gateway?: IGateway;
}
