/**
 * Plain objects shaped like `GET /api/vgpu/history` replies, for the unit tests.
 */
import {
  HistoryStore,
  IGPUHistory,
  IGPUHistoryPoint,
  IHistoryReply,
  ISliceHistory
} from '../store/historyapi';

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

/**
 * A kernel's 1/4 GPU slice "up to 1/2" of 16 GiB GPU 0 (`work/<id>.ipynb`): request 4 GiB, limit
 * 8 GiB, using 3, 6 and 10 GiB at `ts` (within its request, bursting, beyond its limit).
 */
export function elasticSlice(id: string, ts: number[]): ISliceHistory {
  const used = [3, 6, 10];
  return {
    ...slice(id, ts),
    kernel_display_name: 'Python 3 (1/4 GPU, up to 1/2)',
    request_text: '1/4 GPU, up to 1/2',
    memory_limit_total: 8 * GiB,
    points: ts.map((t, i) => ({ t, used: used[i % 3] * GiB, util: 80 }))
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

/** A round time (2023-11-14 22:13:20 UTC): the clock of the replies below. */
export const T0 = 1700000000;

/** GPU 0 with every series NVML can give, GPU 1 with memory and utilisation only. */
export function fullReply(fields: Partial<IHistoryReply> = {}): IHistoryReply {
  const rich = gpu('GPU-0', 0, []);
  rich.name = 'NVIDIA A100-SXM4-80GB';
  rich.memory_total = 80 * GiB;
  rich.power_limit = 400;
  rich.points = [0, 10, 20].map(dt =>
    gpuPoint(T0 + dt, {
      power: 150 + dt,
      temp: 50,
      pcie_tx: 1024 ** 2 * dt,
      pcie_rx: 2 * 1024 ** 2 * dt
    })
  );
  const plain = gpu('GPU-1', 1, [T0, T0 + 10, T0 + 20]);
  const notebook = slice('train', [T0, T0 + 10, T0 + 20]);
  const command = {
    ...slice('cmd', [T0 + 10, T0 + 20]),
    holder_kind: 'command' as const,
    kernel_id: null,
    path: null,
    kernel_display_name: null,
    command: ['/opt/conda/bin/python', 'train.py'],
    request_text: '8 GiB',
    gpus: ['GPU-1'],
    gpu_indices: [1],
    memory_reserved_total: 8 * GiB
  };
  return reply(T0 + 20, [rich, plain], [notebook, command], fields);
}

/** A history that has taken in `r`. */
export function storeOf(r: IHistoryReply): HistoryStore {
  const store = new HistoryStore();
  store.apply(r);
  return store;
}
