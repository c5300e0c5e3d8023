/**
 * A time-series chart, hand-written SVG (no chart library): several series on one or two value
 * axes with tick values in their units, clock times along the bottom, gaps where a value is
 * unknown, horizontal reference lines (a reservation, a power limit), a hover readout (pointer
 * or arrow keys) and drag-to-zoom.
 *
 * It is drawn in pixels at the width of its container (a ResizeObserver follows it), so the
 * text keeps its size whatever the width.
 */
import * as React from 'react';

import { formatBytes } from './format';

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

export interface ITimeSeriesProps<P extends ITimePoint> {
  /** Oldest first. */
  points: P[];
  series: ISeries<P>[];
  references?: IReferenceLine[];
  /** The time window shown (seconds, the server's clock). */
  start: number;
  end: number;
  left: IAxis;
  /** A second value axis, on the right (utilisation beside memory). */
  right?: IAxis;
  /** What the chart is of ("GPU 0 memory"), for the summary. */
  subject: string;
  /** Total height in pixels, axes included. */
  height?: number;
  /** The width drawn before the container has been measured. */
  width?: number;
  /** Successive points further apart than this (seconds) are not joined. */
  maxGap?: number;
  /** The wrapper's extra class. */
  className?: string;
  /** The SVG's extra class. */
  plotClassName?: string;
  /** Dragging across the plot selects a time range and passes it here. */
  onZoom?: (start: number, end: number) => void;
  /**
   * The time of the point the readout shows, when the caller holds it (charts sharing one
   * readout); `null` for none. Left undefined, the chart keeps its own.
   */
  hover?: number | null;
  onHover?: (t: number | null) => void;
}

/** Pixels per character of a tick label (10 px type). */
const CHAR_WIDTH = 6;
const MARGIN_TOP = 6;
const MARGIN_BOTTOM = 16;
/** A drag shorter than this (pixels) is a click, not a zoom. */
export const MIN_DRAG_PX = 5;
/** Steps of the nice tick values, per power of ten. */
const NICE_STEPS = [1, 2, 2.5, 4, 5, 10];
/** The steps below one unit of a binary axis (KiB, MiB, GiB), as parts of it. */
const BINARY_PARTS = [0.125, 0.25, 0.5, 1];
/** Steps of the time axis, in seconds. */
const TIME_STEPS = [
  5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600
];
/** The least room between two time labels, in pixels. */
const TIME_LABEL_PX = 56;
/** The least room between two value ticks, in pixels. */
const VALUE_TICK_PX = 24;

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

/**
 * A drag across the plot: started at one x, followed, ended; a drag of at least
 * `MIN_DRAG_PX` pixels calls `onZoom` with the times under its two ends (earliest first).
 */
export class DragZoom {
  constructor(
    /** The time under a pixel of the plot. */
    public timeAt: (x: number) => number,
    public onZoom: (start: number, end: number) => void
  ) {}

  /** The pixels selected so far, [from, to] in the order dragged; null when not dragging. */
  get range(): [number, number] | null {
    return this._from === null ? null : [this._from, this._to];
  }

  begin(x: number): void {
    this._from = x;
    this._to = x;
  }

  /** Follow the pointer; false when no drag is going on. */
  move(x: number): boolean {
    if (this._from === null) {
      return false;
    }
    this._to = x;
    return true;
  }

  /** Finish the drag at `x`; returns the time range passed to `onZoom`, or null for a click. */
  end(x: number): [number, number] | null {
    if (this._from === null) {
      return null;
    }
    const from = this._from;
    this._from = null;
    this._to = x;
    if (Math.abs(x - from) < MIN_DRAG_PX) {
      return null;
    }
    const a = this.timeAt(Math.min(from, x));
    const b = this.timeAt(Math.max(from, x));
    if (!(b > a)) {
      return null;
    }
    this.onZoom(a, b);
    return [a, b];
  }

  cancel(): void {
    this._from = null;
  }

  private _from: number | null = null;
  private _to = 0;
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

// ---------------------------------------------------------------- component

/** A layout effect in the browser, a plain effect where there is no DOM (server rendering). */
const useLayout =
  typeof window === 'undefined' ? React.useEffect : React.useLayoutEffect;

/** The width of `ref`'s element in pixels, followed as it changes; `initial` until measured. */
function useWidth(ref: React.RefObject<HTMLElement>, initial: number): number {
  const [width, setWidth] = React.useState(initial);
  useLayout(() => {
    const element = ref.current;
    if (!element) {
      return;
    }
    const measure = () => {
      const w = Math.floor(element.clientWidth);
      if (w > 0) {
        setWidth(w); // 0 while hidden: keep the last width
      }
    };
    measure();
    if (typeof ResizeObserver === 'undefined') {
      return;
    }
    const observer = new ResizeObserver(measure);
    observer.observe(element);
    return () => observer.disconnect();
  }, []);
  return width;
}

function points2svg(run: [number, number][]): string {
  return run.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
}

/** A time-series chart; see the module's comment. */
export function TimeSeries<P extends ITimePoint>(
  props: ITimeSeriesProps<P>
): JSX.Element {
  const { points, series, start, end, left, right, subject } = props;
  const references = props.references ?? [];
  const height = props.height ?? 140;
  const wrapRef = React.useRef<HTMLDivElement>(null);
  const svgRef = React.useRef<SVGSVGElement>(null);
  const width = Math.max(80, useWidth(wrapRef, props.width ?? 320));
  const [ownHover, setOwnHover] = React.useState<number | null>(null);
  const [selection, setSelection] = React.useState<[number, number] | null>(
    null
  );
  const clipId = `jp-vgpu-clip-${React.useId().replace(/[^A-Za-z0-9_-]/g, '')}`;
  const controlled = props.hover !== undefined;
  const hover = controlled ? (props.hover ?? null) : ownHover;
  const setHover = (t: number | null) => {
    if (!controlled) {
      setOwnHover(t);
    }
    props.onHover?.(t);
  };

  const span = Math.max(1e-6, end - start);
  const { drawn, inside } = pointsInWindow(points, start, end);
  const times = inside.map(p => p.t);

  // Value axes: scaled to what the window shows, and to the reference lines.
  const plotHeight = Math.max(10, height - MARGIN_TOP - MARGIN_BOTTOM);
  const tickCount = Math.max(
    1,
    Math.min(5, Math.floor(plotHeight / VALUE_TICK_PX))
  );
  const highest = (side: AxisSide): number => {
    let top = 0;
    for (const s of series) {
      if ((s.axis ?? 'left') !== side) {
        continue;
      }
      for (const p of inside) {
        const v = s.value(p);
        if (typeof v === 'number' && isFinite(v) && v > top) {
          top = v;
        }
      }
    }
    for (const r of references) {
      if ((r.axis ?? 'left') === side && typeof r.value === 'number') {
        top = Math.max(top, r.value * 1.1);
      }
    }
    return top;
  };
  const scales: { [side in AxisSide]?: IScale } = {
    left: valueScale(highest('left'), tickCount, left)
  };
  if (right) {
    scales.right = valueScale(highest('right'), tickCount, right);
  }
  const labelWidth = (axis: IAxis, scale: IScale) =>
    Math.max(...scale.ticks.map(v => axis.tick(v).length)) * CHAR_WIDTH + 8;
  const marginLeft = Math.max(24, labelWidth(left, scales.left!));
  const marginRight = right
    ? Math.max(24, labelWidth(right, scales.right!))
    : 8;
  const plot = {
    x: marginLeft,
    y: MARGIN_TOP,
    w: Math.max(10, width - marginLeft - marginRight),
    h: plotHeight
  };
  const x = (t: number) => plot.x + ((t - start) / span) * plot.w;
  const y = (v: number, side: AxisSide = 'left') => {
    const top = scales[side]?.top ?? 1;
    return plot.y + plot.h - (Math.max(0, v) / top) * plot.h;
  };
  const timeAt = (px: number) =>
    start + Math.min(1, Math.max(0, (px - plot.x) / plot.w)) * span;

  const drag = React.useRef<DragZoom | null>(null);
  if (drag.current === null) {
    drag.current = new DragZoom(timeAt, () => undefined);
  }
  // The latest scale and callback, whatever render the drag began in.
  drag.current.timeAt = timeAt;
  drag.current.onZoom = (a, b) => props.onZoom?.(a, b);

  const xTicks = timeTicks(
    start,
    end,
    Math.max(1, Math.floor(plot.w / TIME_LABEL_PX))
  );
  const hoverIndex = hover === null ? -1 : nearestIndex(times, hover);
  const hovered = hoverIndex >= 0 ? inside[hoverIndex] : null;
  const label = summary(subject, inside, series, references, start, end);

  const localX = (event: React.PointerEvent<SVGSVGElement>): number => {
    const box = svgRef.current?.getBoundingClientRect();
    if (!box) {
      return 0;
    }
    return (event.clientX - box.left) * (width / (box.width || width));
  };
  const hoverAt = (px: number) => {
    const i = nearestIndex(times, timeAt(px));
    setHover(i >= 0 ? times[i] : null);
  };
  const onPointerDown = (event: React.PointerEvent<SVGSVGElement>) => {
    if (!props.onZoom || event.button !== 0) {
      return;
    }
    const px = localX(event);
    if (px < plot.x || px > plot.x + plot.w) {
      return;
    }
    drag.current!.begin(px);
    svgRef.current?.setPointerCapture?.(event.pointerId);
    setSelection(drag.current!.range);
  };
  const onPointerMove = (event: React.PointerEvent<SVGSVGElement>) => {
    const px = localX(event);
    if (drag.current!.move(px)) {
      setSelection(drag.current!.range);
    }
    hoverAt(px);
  };
  const onPointerUp = (event: React.PointerEvent<SVGSVGElement>) => {
    const range = drag.current!.end(localX(event));
    setSelection(null);
    if (range) {
      setHover(null);
    }
  };
  const onPointerCancel = () => {
    drag.current!.cancel();
    setSelection(null);
  };
  const onPointerLeave = () => {
    if (drag.current!.range === null) {
      setHover(null);
    }
  };
  const onKeyDown = (event: React.KeyboardEvent) => {
    if (times.length === 0) {
      return;
    }
    const current = hoverIndex >= 0 ? hoverIndex : times.length - 1;
    const stride = event.shiftKey ? 10 : 1;
    let next: number | null;
    switch (event.key) {
      case 'ArrowLeft':
        next = hoverIndex < 0 ? current : current - stride;
        break;
      case 'ArrowRight':
        next = hoverIndex < 0 ? current : current + stride;
        break;
      case 'Home':
        next = 0;
        break;
      case 'End':
        next = times.length - 1;
        break;
      case 'Escape':
        setHover(null);
        return;
      default:
        return;
    }
    event.preventDefault();
    setHover(times[Math.min(times.length - 1, Math.max(0, next))]);
  };

  const sideOf = (s: { axis?: AxisSide }): AxisSide => s.axis ?? 'left';
  const readoutX = hovered ? x(hovered.t) : 0;
  const readoutOnLeft = readoutX > plot.x + plot.w / 2;

  return (
    <div
      ref={wrapRef}
      className={`jp-vgpu-TimeSeries ${props.className ?? ''}`}
      tabIndex={0}
      role="group"
      aria-roledescription="chart"
      aria-label={`${subject}: arrow keys read the values`}
      onKeyDown={onKeyDown}
      onFocus={() => {
        if (hover === null && times.length > 0) {
          setHover(times[times.length - 1]);
        }
      }}
      onBlur={() => setHover(null)}
    >
      <svg
        ref={svgRef}
        className={`jp-vgpu-TimeSeries-svg ${props.plotClassName ?? ''}`}
        width={width}
        height={height}
        viewBox={`0 0 ${width} ${height}`}
        role="img"
        aria-label={label}
        data-points={inside.length}
        data-start={start}
        data-end={end}
        onPointerDown={onPointerDown}
        onPointerMove={onPointerMove}
        onPointerUp={onPointerUp}
        onPointerCancel={onPointerCancel}
        onPointerLeave={onPointerLeave}
      >
        <title>{label}</title>
        <defs>
          <clipPath id={clipId}>
            <rect
              x={plot.x}
              y={plot.y - 2}
              width={plot.w}
              height={plot.h + 4}
            />
          </clipPath>
        </defs>
        <rect
          className="jp-vgpu-TimeSeries-bg"
          x={plot.x}
          y={plot.y}
          width={plot.w}
          height={plot.h}
        />
        <g className="jp-vgpu-TimeSeries-axis jp-vgpu-mod-left">
          {scales.left!.ticks.map(v => (
            <g key={v}>
              <line
                className="jp-vgpu-TimeSeries-grid"
                x1={plot.x}
                x2={plot.x + plot.w}
                y1={y(v)}
                y2={y(v)}
              />
              <text
                className="jp-vgpu-TimeSeries-tick"
                x={plot.x - 4}
                y={y(v)}
                dy="0.32em"
                textAnchor="end"
              >
                {left.tick(v)}
              </text>
            </g>
          ))}
        </g>
        {right && (
          <g className="jp-vgpu-TimeSeries-axis jp-vgpu-mod-right">
            {scales.right!.ticks.map(v => (
              <text
                key={v}
                className="jp-vgpu-TimeSeries-tick"
                x={plot.x + plot.w + 4}
                y={y(v, 'right')}
                dy="0.32em"
                textAnchor="start"
              >
                {right.tick(v)}
              </text>
            ))}
          </g>
        )}
        <g className="jp-vgpu-TimeSeries-axis jp-vgpu-mod-time">
          {xTicks.ticks.map(t => {
            const tx = x(t);
            const nearEdge = tx < plot.x + 14 || tx > plot.x + plot.w - 14;
            return (
              <g key={t}>
                <line
                  className="jp-vgpu-TimeSeries-timeTick"
                  x1={tx}
                  x2={tx}
                  y1={plot.y + plot.h}
                  y2={plot.y + plot.h + 3}
                />
                {!nearEdge && (
                  <text
                    className="jp-vgpu-TimeSeries-tick"
                    x={tx}
                    y={height - 3}
                    textAnchor="middle"
                  >
                    {clockTime(t, xTicks.step < 60)}
                  </text>
                )}
              </g>
            );
          })}
        </g>
        <g clipPath={`url(#${clipId})`}>
          {series.map(s =>
            s.areaClassName
              ? segments(drawn, s.value, props.maxGap).map((run, i) => {
                  const base = plot.y + plot.h;
                  const xy = run.map(
                    ([t, v]) => [x(t), y(v, sideOf(s))] as [number, number]
                  );
                  return (
                    <polygon
                      key={`${s.id}-area-${i}`}
                      className={`jp-vgpu-TimeSeries-area ${s.areaClassName}`}
                      points={`${xy[0][0].toFixed(1)},${base} ${points2svg(xy)} ${xy[xy.length - 1][0].toFixed(1)},${base}`}
                    />
                  );
                })
              : null
          )}
          {references.map(r =>
            typeof r.value === 'number' && isFinite(r.value) ? (
              <line
                key={r.id}
                className={`jp-vgpu-TimeSeries-reference ${r.className}`}
                x1={plot.x}
                x2={plot.x + plot.w}
                y1={y(r.value, sideOf(r))}
                y2={y(r.value, sideOf(r))}
              />
            ) : null
          )}
          {series.map(s =>
            segments(drawn, s.value, props.maxGap).map((run, i) => (
              <polyline
                key={`${s.id}-${i}`}
                className={`jp-vgpu-TimeSeries-line ${s.className}`}
                points={points2svg(
                  run.map(([t, v]) => [x(t), y(v, sideOf(s))])
                )}
              />
            ))
          )}
        </g>
        {inside.length === 0 && (
          <text
            className="jp-vgpu-TimeSeries-empty"
            x={plot.x + plot.w / 2}
            y={plot.y + plot.h / 2}
            dy="0.32em"
            textAnchor="middle"
          >
            no data in this range yet
          </text>
        )}
        {selection && (
          <rect
            className="jp-vgpu-TimeSeries-selection"
            x={Math.max(plot.x, Math.min(...selection))}
            y={plot.y}
            width={Math.min(
              Math.abs(selection[1] - selection[0]),
              plot.x + plot.w - Math.max(plot.x, Math.min(...selection))
            )}
            height={plot.h}
          />
        )}
        {hovered && (
          <g className="jp-vgpu-TimeSeries-hover">
            <line
              className="jp-vgpu-TimeSeries-rule"
              x1={readoutX}
              x2={readoutX}
              y1={plot.y}
              y2={plot.y + plot.h}
            />
            {series.map(s => {
              const v = s.value(hovered);
              return typeof v === 'number' && isFinite(v) ? (
                <circle
                  key={s.id}
                  className={`jp-vgpu-TimeSeries-dot ${s.className}`}
                  cx={readoutX}
                  cy={y(v, sideOf(s))}
                  r={3}
                />
              ) : null;
            })}
          </g>
        )}
      </svg>
      <div
        className="jp-vgpu-TimeSeries-readout"
        role="status"
        aria-live="polite"
        hidden={!hovered}
        style={
          hovered
            ? readoutOnLeft
              ? { right: `${width - readoutX + 8}px`, top: `${plot.y}px` }
              : { left: `${readoutX + 8}px`, top: `${plot.y}px` }
            : undefined
        }
      >
        {hovered && (
          <>
            <div className="jp-vgpu-TimeSeries-readoutTime">
              {clockTime(hovered.t, true)}
            </div>
            {series.map(s => (
              <div key={s.id} className="jp-vgpu-TimeSeries-readoutRow">
                <span className={`jp-vgpu-TimeSeries-swatch ${s.className}`} />
                <span className="jp-vgpu-TimeSeries-readoutLabel">
                  {s.label}
                </span>
                <span className="jp-vgpu-TimeSeries-readoutValue">
                  {s.format(s.value(hovered))}
                </span>
              </div>
            ))}
            {references.map(r =>
              typeof r.value === 'number' ? (
                <div key={r.id} className="jp-vgpu-TimeSeries-readoutRow">
                  <span
                    className={`jp-vgpu-TimeSeries-swatch jp-vgpu-mod-reference ${r.className}`}
                  />
                  <span className="jp-vgpu-TimeSeries-readoutLabel">
                    {r.label}
                  </span>
                  <span className="jp-vgpu-TimeSeries-readoutValue">
                    {r.format(r.value)}
                  </span>
                </div>
              ) : null
            )}
          </>
        )}
      </div>
    </div>
  );
}
