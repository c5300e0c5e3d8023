/**
 * How sizes, shares and holders read in the sidebar and the status bar.
 */
import { PathExt } from '@jupyterlab/coreutils';

import { ISlice } from './api';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/**
 * "2.1 GiB", "512 MiB", "0 B"; "–" when unknown. The same rule as the server's
 * `jupyter_vgpu.units.format_bytes`, so a figure reads the same in the CLI, `%vgpu` and here.
 */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !isFinite(bytes)) {
    return '–';
  }
  const units: [string, number, number][] = [
    ['TiB', 1024 ** 4, 1],
    ['GiB', GiB, 1],
    ['MiB', MiB, 0],
    ['KiB', 1024, 0]
  ];
  for (const [unit, size, digits] of units) {
    if (Math.abs(bytes) >= size) {
      return `${(bytes / size).toFixed(digits)} ${unit}`;
    }
  }
  return `${Math.round(bytes)} B`;
}

/**
 * "2.1 / 4.0 GiB": both numbers in the unit of the larger one, so they compare at a glance.
 */
export function formatUsage(
  used: number | null | undefined,
  total: number
): string {
  const inGiB = total >= GiB;
  const unit = inGiB ? GiB : MiB;
  const digits = inGiB ? 1 : 0;
  const show = (value: number | null | undefined) =>
    value === null || value === undefined || !isFinite(value)
      ? '–'
      : (value / unit).toFixed(digits);
  return `${show(used)} / ${show(total)} ${inGiB ? 'GiB' : 'MiB'}`;
}

/** "63%", or "–" when NVML cannot say. */
export function formatPercent(value: number | null | undefined): string {
  return value === null || value === undefined ? '–' : `${Math.round(value)}%`;
}

/** A share in [0, 1] of `total`, clamped so bars never overflow. */
export function share(part: number | null | undefined, total: number): number {
  if (!part || !total || part < 0) {
    return 0;
  }
  return Math.min(1, part / total);
}

/** The command line of a `jupyter vgpu run` holder, as one string. */
export function commandText(slice: ISlice): string {
  if (Array.isArray(slice.command)) {
    return slice.command.join(' ');
  }
  return slice.command ?? '';
}

/**
 * What a user calls the holder of a slice: the notebook's file name, the command, or the kernel.
 */
export function holderLabel(slice: ISlice): string {
  if (slice.holder_kind === 'command') {
    // "/opt/conda/bin/python train.py" reads as "python train.py"; the tooltip has it all.
    const [program, ...args] = commandText(slice).trim().split(/\s+/);
    return program
      ? [PathExt.basename(program), ...args].join(' ')
      : `slice ${slice.id}`;
  }
  if (slice.path) {
    return PathExt.basename(slice.path);
  }
  return slice.kernel_id
    ? `kernel ${slice.kernel_id.slice(0, 8)}`
    : `slice ${slice.id}`;
}

/** Words for the server's usage state. */
export function stateText(slice: ISlice): string | null {
  switch (slice.state) {
    case 'near':
      return 'Near its slice: the next allocation may fail.';
    case 'over':
      return 'Over its slice: it uses memory reserved for others.';
    default:
      return null;
  }
}

/**
 * What a slice's share reserves, in words: the server's `share_note` when it sends one, else
 * decided from how the slice was placed (only MPS and MIG share out compute).
 */
export function shareNote(slice: ISlice): string {
  if (slice.share_note) {
    return slice.share_note;
  }
  switch (slice.tier_kind) {
    case 'mps':
      return slice.fraction
        ? `memory, and ${Math.round(slice.fraction * 100)}% of the SMs (MPS)`
        : 'memory, and a share of the SMs (MPS)';
    case 'mig':
      return 'a MIG device: its memory and compute';
    default:
      return 'memory only; compute is shared';
  }
}

/** "1/4 GPU reserves memory only; compute is shared." */
export function shareSentence(slice: ISlice): string {
  return `${slice.request_text} reserves ${shareNote(slice)}.`;
}

/** "42 s", "3 min 5 s", "1 h 2 min": how long something has waited. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '–';
  }
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3600) {
    const rest = s % 60;
    return `${Math.floor(s / 60)} min${rest ? ` ${rest} s` : ''}`;
  }
  const minutes = Math.floor((s % 3600) / 60);
  return `${Math.floor(s / 3600)} h${minutes ? ` ${minutes} min` : ''}`;
}

/** A notebook path or a command as a user names it: the notebook's file name, or the command. */
export function pathLabel(path: string | null | undefined): string {
  if (!path) {
    return '';
  }
  return path.endsWith('.ipynb') ? PathExt.basename(path) : path;
}
