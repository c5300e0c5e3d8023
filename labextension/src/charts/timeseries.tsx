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

import { Axes, chartFrame, frameTimeTicks } from './axes';
import { HoverMarks, keyedIndex, Readout } from './hover';
import {
  IAxis,
  IReferenceLine,
  ISeries,
  ITimePoint,
  nearestIndex,
  pointsInWindow,
  summary
} from './scales';
import { Series } from './series';
import { DragZoom } from './dragzoom';

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

  const { drawn, inside } = pointsInWindow(points, start, end);
  const times = inside.map(p => p.t);
  const frame = chartFrame({
    inside,
    series,
    references,
    start,
    end,
    left,
    right,
    width,
    height
  });
  const { plot, timeAt } = frame;

  const drag = React.useRef<DragZoom | null>(null);
  if (drag.current === null) {
    drag.current = new DragZoom(timeAt, () => undefined);
  }
  // The latest scale and callback, whatever render the drag began in.
  drag.current.timeAt = timeAt;
  drag.current.onZoom = (a, b) => props.onZoom?.(a, b);

  const xTicks = frameTimeTicks(frame, start, end);
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
    const next = keyedIndex(
      event.key,
      event.shiftKey,
      hoverIndex,
      times.length
    );
    if (next === undefined) {
      return;
    }
    if (next !== null) {
      event.preventDefault();
    }
    setHover(next === null ? null : times[next]);
  };

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
        <Axes
          frame={frame}
          left={left}
          right={right}
          height={height}
          xTicks={xTicks}
        />
        <Series
          frame={frame}
          clipId={clipId}
          drawn={drawn}
          series={series}
          references={references}
          maxGap={props.maxGap}
        />
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
        {hovered && <HoverMarks frame={frame} at={hovered} series={series} />}
      </svg>
      <Readout
        frame={frame}
        width={width}
        at={hovered}
        series={series}
        references={references}
      />
    </div>
  );
}
