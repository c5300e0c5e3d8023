/**
 * Plain objects shaped like `GET /api/vgpu/cluster` and a node's history replies, for the unit
 * tests: four nodes, one of them stale, one with figures Prometheus does not have.
 */
import type {
  IClusterGPU,
  IClusterNode,
  IClusterReply,
  IClusterSlice,
  INodeHistoryReply
} from '../store/clustertypes';

export const GiB = 1024 ** 3;

/** The cluster's clock: the reply's `read_at`. */
export const READ_AT = 1796602234;

/** A 16 GiB GPU: `booked` and `used` in GiB, the rest free. */
export function clusterGPU(
  index: number,
  booked: number,
  used: number,
  fields: Partial<IClusterGPU> = {}
): IClusterGPU {
  return {
    index,
    uuid: `GPU-${index}-${booked}-${used}`,
    total: 16 * GiB,
    booked: booked * GiB,
    used: used * GiB,
    free: (16 - booked) * GiB,
    utilization: 10,
    ...fields
  };
}

/** A fresh node seen 3 s before the read, nobody waiting. */
export function clusterNode(
  hostname: string,
  gpus: IClusterGPU[],
  fields: Partial<IClusterNode> = {}
): IClusterNode {
  return {
    hostname,
    last_seen: READ_AT - 3,
    stale: false,
    problem: null,
    figures_at: READ_AT - 3,
    model: 'Simulated GPU 16GiB',
    gpus,
    waiting: { requests: 0, memory: 0 },
    ...fields
  };
}

/** The stale node's sentence, as the server says it. */
export const PROBLEM =
  'node-c has not been seen for 4 min: its exporter does not answer Prometheus; shown as it was 4 min ago.';

/**
 * node-a: 2 GPUs, 4 GiB booked on GPU 0 (room on one GPU: 16 GiB on GPU 1); node-b: 1 GPU with
 * 12 GiB booked (room 4 GiB), 2 waiting for 24 GiB; node-c: stale, 1 empty 80 GiB GPU (the most
 * room, but stale); node-d: one GPU whose figures are unknown.
 */
export function clusterNodes(): IClusterNode[] {
  return [
    clusterNode('node-b', [clusterGPU(0, 12, 10)], {
      waiting: { requests: 2, memory: 24 * GiB }
    }),
    clusterNode('node-d', [
      clusterGPU(0, 0, 0, { booked: null, used: null, free: null })
    ]),
    clusterNode(
      'node-c',
      [clusterGPU(0, 0, 0, { total: 80 * GiB, free: 80 * GiB })],
      {
        stale: true,
        problem: PROBLEM,
        last_seen: READ_AT - 240,
        figures_at: READ_AT - 240,
        model: 'NVIDIA A100-SXM4-80GB'
      }
    ),
    clusterNode('node-a', [clusterGPU(0, 4, 1), clusterGPU(1, 0, 0)])
  ];
}

/** One of your slices: a kernel's on `hostname`'s GPU `index`. */
export function clusterSlice(
  id: string,
  hostname: string,
  fields: Partial<IClusterSlice> = {}
): IClusterSlice {
  return {
    id,
    hostname,
    kernel_id: `k-${id}`,
    holder: `work/${id}.ipynb`,
    launcher: 'local',
    tier: 'cooperative',
    gpus: [
      {
        index: 0,
        uuid: 'GPU-0',
        request: 4 * GiB,
        limit: null,
        used: GiB,
        burst: null,
        utilization: 10,
        share_utilization: 40
      }
    ],
    ...fields
  };
}

/** The cluster: the four nodes, your notebook and your command on node-a, a notebook on node-c. */
export function clusterReply(
  fields: Partial<IClusterReply> = {}
): IClusterReply {
  return {
    prometheus: 'http://prometheus:9090',
    read_at: READ_AT,
    stale_after: 60,
    nodes: clusterNodes(),
    slices: [
      clusterSlice('train', 'node-a'),
      clusterSlice('cmd', 'node-a', {
        kernel_id: null,
        holder: '/opt/conda/bin/python eval.py',
        tier: 'mps'
      }),
      clusterSlice('old', 'node-c', {
        gpus: [
          {
            index: null,
            uuid: 'GPU-x',
            request: 8 * GiB,
            limit: null,
            used: null,
            burst: null,
            utilization: null
          }
        ]
      })
    ],
    ...fields
  };
}

/** A node's history of three points a minute apart; the last `used` unknown. */
export function nodeHistoryReply(hostname: string): INodeHistoryReply {
  return {
    hostname,
    seconds: 3600,
    step: 60,
    t: [READ_AT - 120, READ_AT - 60, READ_AT],
    total: [32 * GiB, 32 * GiB, 32 * GiB],
    booked: [0, 4 * GiB, 4 * GiB],
    used: [0, GiB, null],
    yours_booked: [0, 4 * GiB, 4 * GiB],
    yours_used: [0, GiB, null]
  };
}
