/**
 * Sizes, shares of a total, durations and clock times as every view writes them.
 */

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** How many digits `fixed` reads past the ones it keeps: all a double >= 1 has (at most 52). */
const EXACT_DIGITS = 60;

/**
 * `value.toFixed(digits)`, but an exact tie goes to the even digit, as Python's `f"{value:.1f}"`
 * rounds it: 1.25 reads "1.2" (toFixed says "1.3"), 2.5 reads "2", 3.5 reads "4".
 */
export function fixed(value: number, digits: number): string {
  const rounded = value.toFixed(digits);
  const exact = Math.abs(value).toFixed(digits + EXACT_DIGITS);
  const kept = exact.slice(0, -EXACT_DIGITS).replace(/\.$/, '');
  const tie = /^50*$/.test(exact.slice(-EXACT_DIGITS));
  if (tie && Number(kept[kept.length - 1]) % 2 === 0) {
    return `${value < 0 ? '-' : ''}${kept}`; // toFixed rounded up, away from the even digit
  }
  return rounded;
}

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
      return `${fixed(bytes / size, digits)} ${unit}`;
    }
  }
  return `${fixed(bytes, 0)} B`;
}

/**
 * "2.1 / 4.0 GiB": both numbers in the unit of the larger one, so they compare at a glance
 * (rounded as `formatBytes` rounds).
 */
export function formatUsage(
  used: number | null | undefined,
  total: number | null | undefined
): string {
  const inGiB = (total ?? used ?? 0) >= GiB;
  const unit = inGiB ? GiB : MiB;
  const digits = inGiB ? 1 : 0;
  const show = (value: number | null | undefined) =>
    value === null || value === undefined || !isFinite(value)
      ? '–'
      : fixed(value / unit, digits);
  return `${show(used)} / ${show(total)} ${inGiB ? 'GiB' : 'MiB'}`;
}

/** "63%", or "–" when NVML cannot say. */
export function formatPercent(value: number | null | undefined): string {
  return value === null || value === undefined ? '–' : `${Math.round(value)}%`;
}

/** A share in [0, 1] of `total`, clamped so bars never overflow. */
export function share(
  part: number | null | undefined,
  total: number | null | undefined
): number {
  if (!part || !total || part < 0) {
    return 0;
  }
  return Math.min(1, part / total);
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

/**
 * "45 s", "1 min 31 s", "42 min", "3 h 5 min": how long (idle times), never more than it was:
 * each unit is cut, not rounded up (91 s reads "1 min 31 s", not "2 min"), and seconds are said
 * under 10 minutes. The server's rule (`jupyter_vgpu.units.format_duration`), so an idle time
 * reads the same in `jupyter vgpu status`, `%vgpu`, the server's messages and here.
 */
export function formatSpan(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '–';
  }
  const whole = Math.max(0, Math.floor(seconds));
  if (whole < 60) {
    return `${whole} s`;
  }
  const minutes = Math.floor(whole / 60);
  const rest = whole % 60;
  if (minutes < 10) {
    return rest ? `${minutes} min ${rest} s` : `${minutes} min`;
  }
  return minutes < 60
    ? `${minutes} min`
    : `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** "4:32", "0:05", "1:02:03": the time left on a countdown, whole seconds rounded up. */
export function formatCountdown(seconds: number | null | undefined): string {
  const s =
    seconds === null || seconds === undefined || !isFinite(seconds)
      ? 0
      : Math.max(0, Math.ceil(seconds - 1e-9));
  const two = (n: number) => String(n).padStart(2, '0');
  if (s >= 3600) {
    return `${Math.floor(s / 3600)}:${two(Math.floor((s % 3600) / 60))}:${two(s % 60)}`;
  }
  return `${Math.floor(s / 60)}:${two(s % 60)}`;
}

/** "14:32:05": a moment on the browser's clock (ms since the epoch), local time, 24 h. */
export function formatClock(ms: number): string {
  const d = new Date(ms);
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}
