/**
 * Plain objects shaped like `GET /api/vgpu/history` replies, for the unit tests.
 */
import {
  IGPUHistory,
  IGPUHistoryPoint,
  IHistoryReply,
  ISliceHistory
} from '../historyapi';

export const GiB = 1024 ** 3;

/** A GPU's point: 2 GiB used, 4 GiB reserved, 50 %, the rest unknown. */
export function gpuPoint(
  t: number,
  fields: Partial<IGPUHistoryPoint> = {}
): IGPUHistoryPoint {
  return {
    t,
    used: 2 * GiB,
    reserved: 4 * GiB,
    util: 50,
    power: null,
    temp: null,
    pcie_tx: null,
    pcie_rx: null,
    ...fields
  };
}

/** A GPU with a point at each of `ts`. */
export function gpu(uuid: string, index: number, ts: number[]): IGPUHistory {
  return {
    uuid,
    index,
    name: 'Simulated GPU',
    memory_total: 16 * GiB,
    power_limit: null,
    points: ts.map(t => gpuPoint(t))
  };
}

/** A kernel's 1/4 slice of GPU 0 (`work/<id>.ipynb`) with a point at each of `ts`. */
export function slice(id: string, ts: number[]): ISliceHistory {
  return {
    id,
    holder_kind: 'kernel',
    kernel_id: 'k-' + id,
    path: `work/${id}.ipynb`,
    command: null,
    kernel_display_name: 'Python 3 (1/4 GPU)',
    request_text: '1/4 GPU',
    gpus: ['GPU-0'],
    gpu_indices: [0],
    memory_reserved_total: 4 * GiB,
    yours: true,
    points: ts.map(t => ({ t, used: GiB, util: 10 }))
  };
}

/** A reply of `GET /api/vgpu/history`. */
export function reply(
  takenAt: number,
  gpus: IGPUHistory[],
  slices: ISliceHistory[] = [],
  fields: Partial<IHistoryReply> = {}
): IHistoryReply {
  return {
    simulated: true,
    available: true,
    message: null,
    taken_at: takenAt,
    step: 10,
    seconds: 3600,
    gpus,
    slices,
    ...fields
  };
}
