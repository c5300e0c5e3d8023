/**
 * The cluster as a site's Prometheus sees it, typed: `GET /api/vgpu/cluster` and a node's
 * memory over time, `GET /api/vgpu/cluster/nodes/<hostname>/history` (docs/rest.md). Every
 * figure is null where it is unknown, never 0.
 */

/** One GPU of a node, from its last reading (a stale node's: its last whole scrape's). */
export interface IClusterGPU {
  index: number;
  uuid: string;
  /** Only when the node's GPUs are not all one model (else the node's `model`). */
  model?: string;
  /** Bytes. */
  total: number | null;
  /** What every user's slices book here. */
  booked: number | null;
  used: number | null;
  /** What one new slice could get here now. */
  free: number | null;
  /** Percent of the whole GPU. */
  utilization: number | null;
}

/** A node's line: every user's places, counted. */
export interface IClusterWaiting {
  requests: number | null;
  /** The memory they ask for (bytes). */
  memory: number | null;
}

/** One node that served jupyter-vgpu's series to Prometheus in the last 7 days. */
export interface IClusterNode {
  /** The exporter's `hostname` label. */
  hostname: string;
  /** Its newest reading (Unix time, the server's clock); null: never read. */
  last_seen: number | null;
  /** Its exporter stopped answering, or cannot read the node: the figures are its last ones. */
  stale: boolean;
  /** Why it is stale and how old its figures are, one sentence; null when fresh. */
  problem: string | null;
  /** When the figures shown were read. */
  figures_at: number | null;
  /** The GPUs' model when they are all one; null otherwise (each GPU says its own). */
  model: string | null;
  gpus: IClusterGPU[];
  waiting: IClusterWaiting;
}

/** One of your slices on one GPU of its node. */
export interface IClusterSliceGPU {
  /** Null when the node's GPU is not in its figures. */
  index: number | null;
  uuid: string;
  /** What the slice books here (bytes), guaranteed. */
  request: number | null;
  /** An elastic slice's limit here; null for a fixed slice. */
  limit: number | null;
  used: number | null;
  /** An elastic slice's use above its request; null for a fixed slice. */
  burst: number | null;
  utilization: number | null;
  share_utilization?: number | null;
}

/** One of your slices, on whichever node holds it. */
export interface IClusterSlice {
  id: string;
  hostname: string;
  /** Null for a command's slice (`jupyter vgpu run`). */
  kernel_id: string | null;
  /** The notebook's path, or the command. */
  holder: string;
  launcher: string;
  /** The tier's name: cooperative, mps, mig, hami-core, mps-partition. */
  tier: string;
  gpus: IClusterSliceGPU[];
}

/** `GET /api/vgpu/cluster`: every node and your slices on them. */
export interface IClusterReply {
  /** Where it was read (no password). */
  prometheus: string;
  /** When (Unix time, the server's clock). */
  read_at: number;
  /** A node whose newest reading is older than this (seconds) is stale. */
  stale_after: number;
  nodes: IClusterNode[];
  /** Yours only: another user's slices are only booked memory in their node's figures. */
  slices: IClusterSlice[];
}

/**
 * `GET /api/vgpu/cluster/nodes/<hostname>/history?seconds=N`: a node's memory over time, summed
 * over its GPUs, in arrays of one length (null where unknown).
 */
export interface INodeHistoryReply {
  hostname: string;
  seconds: number;
  /** Seconds between two points. */
  step: number;
  /** Unix seconds, oldest first. */
  t: number[];
  total: (number | null)[];
  booked: (number | null)[];
  used: (number | null)[];
  /** What your slices book and use there. */
  yours_booked: (number | null)[];
  yours_used: (number | null)[];
}

/** One point of a node's history, as the chart reads it. */
export interface INodeHistoryPoint {
  t: number;
  total: number | null;
  booked: number | null;
  used: number | null;
  yours_booked: number | null;
  yours_used: number | null;
}
