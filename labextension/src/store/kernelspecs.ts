/**
 * What a sliced kernelspec asks for, read from its `kernel_provisioner` metadata (the same keys
 * the provisioner reads: `gpu_fraction`, `gpu_memory`, `gpus`, `wait_timeout`).
 */
import { KernelSpec } from '@jupyterlab/services';

import { IDevice } from './api';
import { formatBytes } from '../format/format';

const UNITS: { [unit: string]: number } = {
  b: 1,
  k: 1e3,
  kb: 1e3,
  m: 1e6,
  mb: 1e6,
  g: 1e9,
  gb: 1e9,
  t: 1e12,
  tb: 1e12,
  kib: 1024,
  mib: 1024 ** 2,
  gib: 1024 ** 3,
  tib: 1024 ** 4
};

/** 0.25, "1/4", "25%", "0.25" as a share in (0, 1]; null when it is none of these. */
export function parseFraction(value: unknown): number | null {
  if (typeof value === 'number') {
    return isFinite(value) && value > 0 ? value : null;
  }
  if (typeof value !== 'string') {
    return null;
  }
  const text = value.trim();
  let match = /^(\d+(?:\.\d+)?)\s*\/\s*(\d+(?:\.\d+)?)$/.exec(text);
  if (match) {
    const share = Number(match[1]) / Number(match[2]);
    return isFinite(share) && share > 0 ? share : null;
  }
  match = /^(\d+(?:\.\d+)?)\s*%$/.exec(text);
  if (match) {
    return Number(match[1]) / 100 || null;
  }
  const share = Number(text);
  return text && isFinite(share) && share > 0 ? share : null;
}

/** "6GiB", "512 MiB", "8GB", 1073741824 as bytes; null when it is none of these. */
export function parseBytes(value: unknown): number | null {
  if (typeof value === 'number') {
    return isFinite(value) && value > 0 ? value : null;
  }
  if (typeof value !== 'string') {
    return null;
  }
  const match = /^(\d+(?:\.\d+)?)\s*([a-zA-Z]*)$/.exec(value.trim());
  if (!match) {
    return null;
  }
  const unit = UNITS[(match[2] || 'b').toLowerCase()];
  return unit ? Number(match[1]) * unit : null;
}

/**
 * How much of the GPUs a sliced kernelspec asks for, as a sortable pair: [0, GPUs' worth]
 * when it is known as a share (a memory amount converts with `gpuMemory`), [1, bytes] for an
 * amount when the GPUs' size is unknown; null for kernelspecs without a slice.
 */
export function sliceSize(
  spec: KernelSpec.ISpecModel | undefined,
  gpuMemory: number | null
): [number, number] | null {
  const config = sliceConfig(spec);
  if (!config) {
    return null;
  }
  const gpus = Math.max(1, Math.floor(Number(config.gpus ?? 1)) || 1);
  const fraction = parseFraction(config.gpu_fraction);
  if (fraction !== null) {
    return [0, gpus * fraction];
  }
  const bytes = parseBytes(config.gpu_memory);
  if (bytes !== null) {
    return gpuMemory ? [0, (gpus * bytes) / gpuMemory] : [1, gpus * bytes];
  }
  return [0, gpus]; // whole GPUs
}

/** The provisioner's config of a sliced kernelspec, or null for any other kernelspec. */
export function sliceConfig(
  spec: KernelSpec.ISpecModel | undefined
): { [key: string]: unknown } | null {
  const provisioner = (spec?.metadata as any)?.kernel_provisioner;
  if (!provisioner || provisioner.provisioner_name !== 'vgpu-provisioner') {
    return null;
  }
  return provisioner.config ?? {};
}

/** The keys that say how much a kernelspec asks for and how long it waits. */
const SIZE_KEYS = new Set([
  'gpu_fraction',
  'gpu_memory',
  'gpus',
  'wait_timeout'
]);

/**
 * How a sliced kernelspec starts its kernel apart from its size and wait: its launcher (absent:
 * `local`) and the launcher's own options, as one comparable string.
 */
function startedHow(config: { [key: string]: unknown }): string {
  const rest: { [key: string]: unknown } = { launcher: 'local' };
  for (const key of Object.keys(config).sort()) {
    if (!SIZE_KEYS.has(key)) {
      rest[key] = config[key];
    }
  }
  return JSON.stringify(rest);
}

/**
 * An installed kernelspec that asks for the same slice as `name`, started the same way (its
 * launcher and options: a Slurm kernel's alternative waits in Slurm's queue, not for this
 * server's GPUs), and waits in line for it longer than `name` does (`wait_timeout`; the longest
 * wait when there are several), or null.
 */
export function waitingAlternative(
  specs: KernelSpec.ISpecModels | null | undefined,
  name: string | null
): KernelSpec.ISpecModel | null {
  const all = specs?.kernelspecs ?? {};
  const asked = name ? all[name] : undefined;
  const config = sliceConfig(asked);
  if (!asked || !config) {
    return null;
  }
  const size = JSON.stringify(sliceSize(asked, null));
  const how = startedHow(config);
  let best: KernelSpec.ISpecModel | null = null;
  let longest = Number(config.wait_timeout ?? 0) || 0;
  for (const spec of Object.values(all)) {
    const other = sliceConfig(spec);
    const wait = Number(other?.wait_timeout ?? 0);
    if (
      spec &&
      other &&
      spec.name !== name &&
      wait > longest &&
      JSON.stringify(sliceSize(spec, null)) === size &&
      startedHow(other) === how
    ) {
      best = spec;
      longest = wait;
    }
  }
  return best;
}

/** Whether a sliced kernelspec's slice fits on the GPUs now, in words for the kernel picker. */
export interface IKernelspecFit {
  fits: boolean;
  /** "fits now" / "no room now": beside the kernel's name in the picker's list. */
  short: string;
  /** "Asks for 4.0 GiB on 1 GPU: fits now on GPU 0 (12.0 GiB free to reserve)." */
  sentence: string;
}

/**
 * Whether a new kernel of `spec` would get its slice now, from the GPUs' `memory_free` (what one
 * new slice can reserve: the server's figure): each of its GPUs needs its share of that GPU (or
 * its amount). Null for a kernelspec without a slice or when no GPU is known.
 */
export function kernelspecFit(
  spec: KernelSpec.ISpecModel | undefined,
  devices: readonly IDevice[]
): IKernelspecFit | null {
  const config = sliceConfig(spec);
  if (!config || devices.length === 0) {
    return null;
  }
  const gpus = Math.max(1, Math.floor(Number(config.gpus ?? 1)) || 1);
  const fraction = parseFraction(config.gpu_fraction);
  const bytes = fraction === null ? parseBytes(config.gpu_memory) : null;
  const need = (d: IDevice) =>
    fraction !== null
      ? Math.min(1, fraction) * d.memory_total
      : (bytes ?? d.memory_total); // neither: a whole GPU
  // A byte's rounding never turns "fits" into "does not".
  const room = devices.filter(d => d.memory_free + 1024 >= need(d));
  const asked = `${formatBytes(need(devices[0]))} on ${gpus === 1 ? '1 GPU' : `${gpus} GPUs`}`;
  const wait = Number(config.wait_timeout ?? 0);
  if (room.length >= gpus) {
    const where = room
      .slice(0, 3)
      .map(
        d => `GPU ${d.index} (${formatBytes(d.memory_free)} free to reserve)`
      )
      .join(', ');
    return {
      fits: true,
      short: 'fits now',
      sentence: `Asks for ${asked}: fits now on ${where}.`
    };
  }
  const most = [...devices].sort((a, b) => b.memory_free - a.memory_free)[0];
  const then =
    wait > 0
      ? `it waits in line up to ${formatWait(wait)} for room`
      : 'its start would be refused';
  return {
    fits: false,
    short: wait > 0 ? 'no room now: waits' : 'no room now',
    sentence:
      `Asks for ${asked}: no room now (the most free to reserve is ${formatBytes(most.memory_free)} on GPU ${most.index}), ` +
      `so ${then}.`
  };
}

/**
 * What to pick instead of the kernelspec `name` when its slice has no room now: among `names`
 * (in their order), the largest sliced kernelspec that fits now and asks for no more than `name`
 * does. Null when `name` fits, has no slice, or nothing smaller fits either.
 */
export function roomierChoice(
  specs: { [name: string]: KernelSpec.ISpecModel | undefined },
  name: string,
  names: readonly string[],
  devices: readonly IDevice[]
): string | null {
  const asked = kernelspecFit(specs[name], devices);
  if (!asked || asked.fits) {
    return null;
  }
  const memory = Math.min(...devices.map(d => d.memory_total));
  const most = sliceSize(specs[name], memory);
  let best: { name: string; size: [number, number] } | null = null;
  for (const other of names) {
    const size = sliceSize(specs[other], memory);
    if (
      size &&
      most &&
      size[0] === most[0] &&
      size[1] <= most[1] + 1e-9 &&
      kernelspecFit(specs[other], devices)?.fits &&
      (!best || size[1] > best.size[1] + 1e-9)
    ) {
      best = { name: other, size };
    }
  }
  return best?.name ?? null;
}

/** "300 s", "5 min", "2 h": a kernelspec's wait_timeout. */
function formatWait(seconds: number): string {
  if (seconds < 120) {
    return `${Math.round(seconds)} s`;
  }
  return seconds < 7200
    ? `${Math.round(seconds / 60)} min`
    : `${Math.round(seconds / 3600)} h`;
}
