/**
 * Plain objects shaped like the server's replies, for the unit tests.
 */
import { IDevice, IHistoryPoint, ISlice, IWaiting } from '../store/api';

/** A slice as `GET /api/vgpu/slices` sends it: a kernel's 1/4 of GPU 0, cooperative. */
export function makeSlice(fields: Partial<ISlice> = {}): ISlice {
  return {
    id: 's1',
    holder_kind: 'kernel',
    yours: true,
    running_here: true,
    kernel_id: '0123456789abcdef',
    kernel_name: 'python3-vgpu',
    kernel_display_name: 'Python 3 (1/4 GPU)',
    path: null,
    command: null,
    owner: 'alice',
    pid: 1234,
    gpus: ['GPU-0'],
    gpu_indices: [0],
    fraction: 0.25,
    request_text: '1/4 GPU',
    memory_reserved: 4 * 1024 ** 3,
    context_allowance: 0,
    memory_limit: 4 * 1024 ** 3,
    memory_used: null,
    utilization: null,
    usage_source: 'measured',
    tier: 'cooperative',
    tier_kind: 'cooperative',
    share_note: null,
    state: 'ok',
    created: 0,
    ...fields
  };
}

/** A request waiting in line for a slice. */
export function makeWaiter(fields: Partial<IWaiting> = {}): IWaiting {
  return {
    ticket: 7,
    position: 1,
    holder_kind: 'kernel',
    holder: '0123456789abcdef',
    kernel_id: '0123456789abcdef',
    path: null,
    request_text: '1/2 GPU',
    waiting_seconds: 3,
    yours: true,
    labels: {},
    ...fields
  };
}

/** A GPU as `GET /api/vgpu/devices` sends it: simulated 16 GiB GPU `index`, 4 GiB reserved. */
export function makeDevice(
  index: number,
  fields: Partial<IDevice> = {}
): IDevice {
  return {
    index,
    uuid: `GPU-${index}`,
    name: 'A100 (simulated)',
    memory_total: 16 * 1024 ** 3,
    memory_used: 0,
    memory_reserved: 4 * 1024 ** 3,
    memory_used_by_slices: 0,
    memory_over_use: 0,
    memory_foreign: 0,
    memory_free: 12 * 1024 ** 3,
    utilization: 0,
    mig_mode: false,
    tier: 'cooperative',
    slices: [],
    ...fields
  };
}

/** History points at the times `ts`. */
export function points(...ts: number[]): IHistoryPoint[] {
  return ts.map(t => ({ t, used: t * 10, util: 50 }));
}
