/**
 * What a sliced kernelspec asks for, read from its `kernel_provisioner` metadata (the same keys
 * the provisioner reads: `gpu_fraction`, `gpu_memory`, `gpus`, `wait_timeout`).
 */
import { KernelSpec } from '@jupyterlab/services';

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
function sliceConfig(
  spec: KernelSpec.ISpecModel | undefined
): { [key: string]: unknown } | null {
  const provisioner = (spec?.metadata as any)?.kernel_provisioner;
  if (!provisioner || provisioner.provisioner_name !== 'vgpu-provisioner') {
    return null;
  }
  return provisioner.config ?? {};
}

/**
 * An installed kernelspec that asks for the same slice as `name` and waits in line for it longer
 * than `name` does (`wait_timeout`; the longest wait when there are several), or null.
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
  let best: KernelSpec.ISpecModel | null = null;
  let longest = Number(config.wait_timeout ?? 0) || 0;
  for (const spec of Object.values(all)) {
    const wait = Number(sliceConfig(spec)?.wait_timeout ?? 0);
    if (
      spec &&
      spec.name !== name &&
      wait > longest &&
      JSON.stringify(sliceSize(spec, null)) === size
    ) {
      best = spec;
      longest = wait;
    }
  }
  return best;
}
