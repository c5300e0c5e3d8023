/**
 * A time-series chart's frame and axes: the value scales (fitted to what the window shows and to
 * the reference lines), the plot's place inside the margins their tick labels need, and the
 * axes drawn from them (value ticks left and right, clock times along the bottom).
 */
import * as React from 'react';

import {
  AxisSide,
  clockTime,
  IAxis,
  IReferenceLine,
  IScale,
  ISeries,
  ITimePoint,
  timeTicks,
  valueScale
} from './scales';

/** Pixels per character of a tick label (10 px type). */
const CHAR_WIDTH = 6;
const MARGIN_TOP = 6;
const MARGIN_BOTTOM = 16;
/** The least room between two time labels, in pixels. */
const TIME_LABEL_PX = 56;
/** How near an end of the plot a time label may be centred, in pixels. */
const EDGE_PX = 14;
/** The least room between two value ticks, in pixels. */
const VALUE_TICK_PX = 24;

/** Where the plot lies in the chart and how times and values map to pixels. */
export interface IFrame {
  plot: { x: number; y: number; w: number; h: number };
  scales: { [side in AxisSide]?: IScale };
  /** A time's x (pixels). */
  x: (t: number) => number;
  /** A value's y (pixels) on the axis of `side`. */
  y: (v: number, side?: AxisSide) => number;
  /** The time at an x (pixels), clamped to the window. */
  timeAt: (px: number) => number;
}

/** The axis a series or a reference line is read on. */
export function sideOf(s: { axis?: AxisSide }): AxisSide {
  return s.axis ?? 'left';
}

/** The frame of a chart `width` x `height` showing `inside` (the points in [start, end]). */
export function chartFrame<P extends ITimePoint>(options: {
  inside: P[];
  series: ISeries<P>[];
  references: IReferenceLine[];
  start: number;
  end: number;
  left: IAxis;
  right?: IAxis;
  width: number;
  height: number;
}): IFrame {
  const { inside, series, references, start, end, left, right, width } =
    options;
  const span = Math.max(1e-6, end - start);
  const plotHeight = Math.max(10, options.height - MARGIN_TOP - MARGIN_BOTTOM);
  const tickCount = Math.max(
    1,
    Math.min(5, Math.floor(plotHeight / VALUE_TICK_PX))
  );
  const highest = (side: AxisSide): number => {
    let top = 0;
    for (const s of series) {
      if (sideOf(s) !== side || s.readoutOnly) {
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
      if (sideOf(r) === side && typeof r.value === 'number') {
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
  return {
    plot,
    scales,
    x: (t: number) => plot.x + ((t - start) / span) * plot.w,
    y: (v: number, side: AxisSide = 'left') => {
      const top = scales[side]?.top ?? 1;
      return plot.y + plot.h - (Math.max(0, v) / top) * plot.h;
    },
    timeAt: (px: number) =>
      start + Math.min(1, Math.max(0, (px - plot.x) / plot.w)) * span
  };
}

/** The clock times along the bottom of a frame showing [start, end]. */
export function frameTimeTicks(
  frame: IFrame,
  start: number,
  end: number
): { ticks: number[]; step: number } {
  return timeTicks(
    start,
    end,
    Math.max(1, Math.floor(frame.plot.w / TIME_LABEL_PX))
  );
}

/** The value axes (left, and right when there is one) and the time axis. */
export function Axes(props: {
  frame: IFrame;
  left: IAxis;
  right?: IAxis;
  height: number;
  xTicks: { ticks: number[]; step: number };
}): JSX.Element {
  const { frame, left, right, height, xTicks } = props;
  const { plot, scales, x, y } = frame;
  // A label centred on its tick, unless the tick is too near an end of the plot to hold it;
  // when every tick is, the one nearest the middle is labelled from its end inward, so an axis
  // always says when it is (a 61 s window has its two minute ticks at its two ends).
  const nearEdge = (t: number) =>
    x(t) < plot.x + EDGE_PX || x(t) > plot.x + plot.w - EDGE_PX;
  const middle = plot.x + plot.w / 2;
  const lone = xTicks.ticks.every(nearEdge)
    ? xTicks.ticks.reduce<number | null>(
        (best, t) =>
          best === null || Math.abs(x(t) - middle) < Math.abs(x(best) - middle)
            ? t
            : best,
        null
      )
    : null;
  const timeLabelAnchor = (t: number): 'middle' | 'start' | 'end' | null => {
    if (!nearEdge(t)) {
      return 'middle';
    }
    if (t !== lone) {
      return null;
    }
    return x(t) < middle ? 'start' : 'end';
  };
  return (
    <>
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
          const anchor = timeLabelAnchor(t);
          return (
            <g key={t}>
              <line
                className="jp-vgpu-TimeSeries-timeTick"
                x1={tx}
                x2={tx}
                y1={plot.y + plot.h}
                y2={plot.y + plot.h + 3}
              />
              {anchor && (
                <text
                  className="jp-vgpu-TimeSeries-tick"
                  x={tx}
                  y={height - 3}
                  textAnchor={anchor}
                >
                  {clockTime(t, xTicks.step < 60)}
                </text>
              )}
            </g>
          );
        })}
      </g>
    </>
  );
}
