/**
 * The maths of a time-series chart, without React: what a series, a reference line and a value
 * axis are; the axes' units; nice value scales and round clock times; the runs a line is drawn
 * in (broken at gaps), the points a window shows, the point nearest a time; the summary a
 * screen reader reads.
 */
import { formatBytes } from '../format/format';

/** Anything with a time (seconds since the epoch, the server's clock). */
export interface ITimePoint {
  t: number;
}

/** How a value reads: "2.1 GiB", "63%", "–" when unknown. */
export type ValueFormat = (value: number | null | undefined) => string;

/** Which value axis a series or a reference line is drawn against. */
export type AxisSide = 'left' | 'right';

/** One line of the chart. */
export interface ISeries<P extends ITimePoint = ITimePoint> {
  /** Unique within the chart. */
  id: string;
  /** What it is, in the readout and the summary: "used", "utilisation". */
  label: string;
  /** Its value at a point: null (or undefined) where it is unknown, which breaks the line. */
  value: (point: P) => number | null | undefined;
  /** How a value reads in the readout and the summary. */
  format: ValueFormat;
  /** The line's class (its colour and dashes come from the stylesheet). */
  className: string;
  /**
   * When set, the area under the line is filled; the polygon gets this class besides
   * `jp-vgpu-TimeSeries-area` (filled with a pale `--jp-vgpu-series`).
   */
  areaClassName?: string;
  /** Defaults to 'left'. */
  axis?: AxisSide;
  /**
   * The part of the area above `value` (an elastic slice's request) drawn again over the area,
   * hatched in the colour `className` sets: use above the request reads apart from use within it.
   */
  areaAbove?: { value: number; className: string };
  /**
   * Read (in the readout, the legend and the summary) but not drawn: a figure made of others,
   * such as an elastic slice's burst above its request.
   */
  readoutOnly?: boolean;
}

/** A horizontal line across the chart: a reservation, a limit. */
export interface IReferenceLine {
  id: string;
  label: string;
  /** Nothing is drawn when it is null. */
  value: number | null | undefined;
  format: ValueFormat;
  className: string;
  axis?: AxisSide;
}

/** A value axis: where it starts (0), where it ends, how its ticks read. */
export interface IAxis {
  /** How a tick value reads ("4 GiB", "50%"). */
  tick: (value: number) => string;
  /** Ticks at round numbers of KiB, MiB, GiB... instead of round decimal numbers. */
  binary?: boolean;
  /** A fixed top (a GPU's memory, 100 %); else the top follows the values shown. */
  max?: number | null;
  /** The lowest top when the values are small or unknown (defaults to 1). */
  least?: number;
}

/** Steps of the nice tick values, per power of ten. */
const NICE_STEPS = [1, 2, 2.5, 4, 5, 10];
/** The steps below one unit of a binary axis (KiB, MiB, GiB), as parts of it. */
const BINARY_PARTS = [0.125, 0.25, 0.5, 1];
/** Steps of the time axis, in seconds. */
const TIME_STEPS = [
  5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600
];

// ---------------------------------------------------------------- units

/** "4 GiB" rather than "4.0 GiB" on an axis. */
export function bytesTick(value: number): string {
  return formatBytes(value).replace(/\.0 /, ' ');
}

/** "1.2 GiB/s"; "–" when unknown. */
export function formatRate(value: number | null | undefined): string {
  const text = formatBytes(value);
  return text === '–' ? text : `${text}/s`;
}

/** "250 W"; "–" when unknown. */
export function formatWatts(value: number | null | undefined): string {
  return value === null || value === undefined || !isFinite(value)
    ? '–'
    : `${Math.round(value)} W`;
}

/** "64 °C"; "–" when unknown. */
export function formatCelsius(value: number | null | undefined): string {
  return value === null || value === undefined || !isFinite(value)
    ? '–'
    : `${Math.round(value)} °C`;
}

/** A short decimal number: "2.5", "40". */
function decimal(value: number): string {
  return String(Number(value.toFixed(2)));
}

/** The value axes the dashboard and the sidebar use. */
export const AXES = {
  bytes: (max?: number | null): IAxis => ({
    tick: bytesTick,
    binary: true,
    max,
    least: 1024 ** 3
  }),
  rate: (): IAxis => ({
    tick: v => `${bytesTick(v)}/s`,
    binary: true,
    least: 1024 ** 2
  }),
  percent: (): IAxis => ({ tick: v => `${decimal(v)}%`, max: 100 }),
  watts: (): IAxis => ({ tick: v => `${decimal(v)} W`, least: 50 }),
  celsius: (): IAxis => ({ tick: v => `${decimal(v)} °C`, least: 50 })
};

// ---------------------------------------------------------------- scales

/** The nice step (1, 2, 2.5, 4, 5 times a power of ten) at least `raw`. */
export function niceStep(raw: number): number {
  if (!(raw > 0) || !isFinite(raw)) {
    return 1;
  }
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  for (const step of NICE_STEPS) {
    if (step * magnitude >= raw * (1 - 1e-9)) {
      return step * magnitude;
    }
  }
  return 10 * magnitude;
}

/** A value axis from 0: its top and its tick values (0 first). */
export interface IScale {
  top: number;
  ticks: number[];
}

/**
 * The scale of an axis showing values up to `highest` with about `count` intervals: a fixed
 * `max` stays the top (a step that divides it is preferred); otherwise the top is the first
 * tick above the values (and above `least`).
 */
export function valueScale(
  highest: number,
  count: number,
  axis: Pick<IAxis, 'binary' | 'max' | 'least'>
): IScale {
  const fixed =
    typeof axis.max === 'number' && isFinite(axis.max) && axis.max > 0
      ? axis.max
      : null;
  const wanted = Math.max(
    fixed ?? 0,
    isFinite(highest) ? highest * 1.05 : 0,
    axis.least ?? 1,
    Number.MIN_VALUE
  );
  const top0 = fixed ?? wanted;
  const unit =
    axis.binary && top0 >= 1024
      ? 1024 ** Math.floor(Math.log(top0) / Math.log(1024))
      : 1;
  const intervals = Math.max(1, Math.round(count));
  // On a binary axis a step below one unit is a power-of-two part of it (256 KiB, not the
  // 204.8 KiB that 0.2 MiB reads as).
  const stepIn = (raw: number): number =>
    axis.binary && unit > 1 && raw < 1
      ? (BINARY_PARTS.find(p => p >= raw * (1 - 1e-9)) ?? 1)
      : niceStep(raw);
  let step = stepIn(top0 / unit / intervals) * unit;
  if (fixed !== null) {
    // 0, 25, 50, 75, 100 rather than 0, 40, 80 when 100 is the top.
    for (const c of [intervals, intervals + 1, intervals - 1, intervals + 2]) {
      if (c < 1) {
        continue;
      }
      const s = stepIn(top0 / unit / c) * unit;
      const n = top0 / s;
      if (Math.abs(n - Math.round(n)) < 1e-6) {
        step = s;
        break;
      }
    }
  }
  const top = fixed ?? Math.ceil(top0 / step - 1e-9) * step;
  const ticks: number[] = [];
  for (let i = 0; i * step <= top * (1 + 1e-9); i++) {
    ticks.push(i * step);
  }
  return { top, ticks };
}

/** "14:05", or "14:05:30" with seconds. */
export function clockTime(t: number, seconds = false): string {
  const date = new Date(t * 1000);
  const two = (n: number) => String(n).padStart(2, '0');
  const hm = `${two(date.getHours())}:${two(date.getMinutes())}`;
  return seconds ? `${hm}:${two(date.getSeconds())}` : hm;
}

/**
 * Times for the labels of the time axis between `start` and `end`, on round clock times (every
 * 10 s, minute, 5 minutes, ... of the local clock), the shortest step that cuts the span into
 * at most `maxCount` parts (so at most `maxCount` + 1 labels).
 */
export function timeTicks(
  start: number,
  end: number,
  maxCount: number
): { step: number; ticks: number[] } {
  const span = Math.max(0, end - start);
  const count = Math.max(1, Math.floor(maxCount));
  const step =
    TIME_STEPS.find(s => span / s <= count) ??
    TIME_STEPS[TIME_STEPS.length - 1];
  // Round in local time: a 30-minute step falls on :00 and :30 of the clock on the wall.
  const offset = -new Date(start * 1000).getTimezoneOffset() * 60;
  const ticks: number[] = [];
  for (
    let t = Math.ceil((start + offset) / step) * step - offset;
    t <= end;
    t += step
  ) {
    ticks.push(t);
  }
  return { step, ticks };
}

// ---------------------------------------------------------------- data

/**
 * The runs of consecutive known values of `value` (each [t, v]), split where a value is unknown
 * and where two points are more than `maxGap` seconds apart.
 */
export function segments<P extends ITimePoint>(
  points: P[],
  value: (point: P) => number | null | undefined,
  maxGap = Infinity
): [number, number][][] {
  const out: [number, number][][] = [];
  let run: [number, number][] = [];
  let previous = -Infinity;
  for (const p of points) {
    const v = value(p);
    const known = typeof v === 'number' && isFinite(v);
    if (!known || p.t - previous > maxGap) {
      if (run.length > 0) {
        out.push(run);
      }
      run = [];
    }
    if (known) {
      run.push([p.t, v as number]);
    }
    previous = p.t;
  }
  if (run.length > 0) {
    out.push(run);
  }
  return out;
}

/** The index of the time in `times` (ascending) nearest to `t`; -1 when there is none. */
export function nearestIndex(times: number[], t: number): number {
  if (times.length === 0 || !isFinite(t)) {
    return -1;
  }
  let lo = 0;
  let hi = times.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (times[mid] < t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo > 0 && Math.abs(times[lo - 1] - t) <= Math.abs(times[lo] - t)) {
    return lo - 1;
  }
  return lo;
}

/**
 * The points drawn for the window [start, end]: those inside it, and the nearest one on each
 * side so the lines run to the edges (the plot clips them).
 */
export function pointsInWindow<P extends ITimePoint>(
  points: P[],
  start: number,
  end: number
): { drawn: P[]; inside: P[] } {
  let first = points.findIndex(p => p.t >= start);
  if (first < 0) {
    first = points.length;
  }
  let last = first - 1;
  while (last + 1 < points.length && points[last + 1].t <= end) {
    last++;
  }
  const inside = points.slice(first, last + 1);
  const drawn = points.slice(
    Math.max(0, first - 1),
    Math.min(points.length, last + 2)
  );
  return { drawn, inside };
}

/** "used 1.2 GiB to 3.4 GiB, latest 2.0 GiB" for each series; then the reference lines. */
export function summary<P extends ITimePoint>(
  subject: string,
  inside: P[],
  series: ISeries<P>[],
  references: IReferenceLine[],
  start: number,
  end: number
): string {
  const head = `${subject}, ${clockTime(start)} to ${clockTime(end)}`;
  if (inside.length === 0) {
    return `${head}: no data yet`;
  }
  const parts = series.map(s => {
    const known = inside
      .map(p => s.value(p))
      .filter((v): v is number => typeof v === 'number' && isFinite(v));
    if (known.length === 0) {
      return `${s.label} unknown`;
    }
    const latest = s.value(inside[inside.length - 1]);
    return (
      `${s.label} ${s.format(Math.min(...known))} to ${s.format(Math.max(...known))}` +
      `, latest ${s.format(latest)}`
    );
  });
  for (const r of references) {
    if (typeof r.value === 'number') {
      parts.push(`${r.label} ${r.format(r.value)}`);
    }
  }
  return `${head}: ${parts.join('; ')}`;
}
