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

import { DragZoom } from './dragzoom';
import {
  AxisSide,
  clockTime,
  IAxis,
  IReferenceLine,
  IScale,
  ISeries,
  ITimePoint,
  nearestIndex,
  pointsInWindow,
  segments,
  summary,
  timeTicks,
  valueScale
} from './scales';

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
/** The least room between two time labels, in pixels. */
const TIME_LABEL_PX = 56;
/** The least room between two value ticks, in pixels. */
const VALUE_TICK_PX = 24;

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
