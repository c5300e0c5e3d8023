/**
 * A slice's use in words: against its reservation, where the figure comes from, the host's CPU and memory.
 */
import { IHostUsage, IMachineUsage, ISlice } from '../store/api';

import { formatBytes, formatUsage } from './units';

/** The memory one slice uses on one of its GPUs (the server sums over all of them). */
export function usedPerGPU(slice: ISlice): number | null {
  if (slice.memory_used === null || slice.memory_used === undefined) {
    return null;
  }
  return slice.memory_used / Math.max(1, slice.gpus.length);
}

/** The memory one slice uses on the GPU `uuid`: measured per GPU when the server can, else an even share. */
export function usedOn(slice: ISlice, uuid: string): number | null {
  const measured = slice.memory_used_by_gpu?.[uuid];
  return typeof measured === 'number' ? measured : usedPerGPU(slice);
}

/** Words for the server's usage state. */
export function stateText(slice: ISlice): string | null {
  // An elastic slice's state is against its limit (it may burst past its request).
  const what =
    slice.memory_burst_limit === null || slice.memory_burst_limit === undefined
      ? 'slice'
      : 'limit';
  switch (slice.state) {
    case 'near':
      return `Near its ${what}: the next allocation may fail.`;
    case 'over':
      return `Over its ${what}: it uses memory reserved for others.`;
    default:
      return null;
  }
}

/**
 * A slice's own bar, used against reserved, as three widths in percent of the bar: `used` (the
 * part of the reservation in use), `over` (use beyond the reservation) and `limit` (where the
 * reservation ends). While the slice stays within its reservation the bar is the reservation
 * (`limit` 100); over it, the bar grows to what is used and the reservation ends at `limit`.
 * Unknown or no use leaves the bar empty.
 */
export function usedOfReserved(
  used: number | null | undefined,
  reserved: number | null | undefined
): { used: number; over: number; limit: number } {
  if (!used || used <= 0 || !isFinite(used) || !reserved || !(reserved > 0)) {
    return { used: 0, over: 0, limit: 100 };
  }
  if (used <= reserved) {
    return { used: (used / reserved) * 100, over: 0, limit: 100 };
  }
  const limit = (reserved / used) * 100;
  return { used: limit, over: 100 - limit, limit };
}

/**
 * Why a slice's use is not known, or how it is measured, in a sentence: the server's
 * `usage_note`; without one (older servers), a sentence of ours while the use is unknown.
 */
export function usageNote(slice: ISlice): string | null {
  const note = slice.usage_note?.trim();
  if (note) {
    return note;
  }
  if (slice.state !== 'unknown') {
    return null;
  }
  const holder = slice.holder_kind === 'command' ? 'command' : 'kernel';
  return `No GPU process of this ${holder} seen yet, and it reports no use: its use shows once it allocates GPU memory.`;
}

/** "CPU 12 % · RAM 310 MiB of 23.4 GiB": a kernel's use of the host; null when nothing is known. */
export function formatHost(host: IHostUsage | null | undefined): string | null {
  if (!host) {
    return null;
  }
  const parts: string[] = [];
  const cpu = host.cpu_percent;
  if (typeof cpu === 'number' && isFinite(cpu)) {
    const cores =
      cpu > 100 && host.cpu_count ? ` of ${host.cpu_count} cores` : '';
    parts.push(`CPU ${Math.round(cpu)} %${cores}`);
  }
  const rss = host.memory_rss;
  if (typeof rss === 'number' && isFinite(rss)) {
    const total = host.memory_total;
    parts.push(
      `RAM ${formatBytes(rss)}${typeof total === 'number' && total > 0 ? ` of ${formatBytes(total)}` : ''}`
    );
  }
  return parts.length ? parts.join(' · ') : null;
}

/** "CPU 12% · RAM 310 MiB": a kernel's use of the host at a glance (the status bar); null: unknown. */
export function hostGlance(host: IHostUsage | null | undefined): string | null {
  if (!host) {
    return null;
  }
  const parts: string[] = [];
  if (typeof host.cpu_percent === 'number' && isFinite(host.cpu_percent)) {
    parts.push(`CPU ${Math.round(host.cpu_percent)}%`);
  }
  if (typeof host.memory_rss === 'number' && isFinite(host.memory_rss)) {
    parts.push(`RAM ${formatBytes(host.memory_rss)}`);
  }
  return parts.length ? parts.join(' · ') : null;
}

/** "CPU 23% of 16 cores · RAM 8.5 / 23.5 GiB": the machine as a whole (the sidebar's header). */
export function machineGlance(
  machine: IMachineUsage | null | undefined
): string | null {
  if (!machine) {
    return null;
  }
  const parts: string[] = [];
  const cores = machine.cpu_count ? ` of ${machine.cpu_count} cores` : '';
  if (
    typeof machine.cpu_percent === 'number' &&
    isFinite(machine.cpu_percent)
  ) {
    parts.push(`CPU ${Math.round(machine.cpu_percent)}%${cores}`);
  } else if (cores) {
    parts.push(`CPU –${cores}`); // the first reading has no figure yet
  }
  if (typeof machine.memory_used === 'number' && machine.memory_total) {
    parts.push(`RAM ${formatUsage(machine.memory_used, machine.memory_total)}`);
  }
  return parts.length ? parts.join(' · ') : null;
}
