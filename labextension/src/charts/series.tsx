/**
 * A time-series chart's series: the filled areas under those that have one (hatched above a
 * series' `areaAbove`), the reference lines (a reservation, a power limit), and each series as
 * lines broken where a value is unknown.
 */
import * as React from 'react';

import { IFrame, sideOf } from './axes';
import { IReferenceLine, ISeries, ITimePoint, segments } from './scales';

function points2svg(run: [number, number][]): string {
  return run.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
}

/** The polygons' `points` of the area under a series, one per run between gaps. */
function areaPoints<P extends ITimePoint>(
  frame: IFrame,
  drawn: P[],
  s: ISeries<P>,
  maxGap?: number
): string[] {
  const { plot, x, y } = frame;
  const base = plot.y + plot.h;
  return segments(drawn, s.value, maxGap).map(run => {
    const xy = run.map(([t, v]) => [x(t), y(v, sideOf(s))] as [number, number]);
    return `${xy[0][0].toFixed(1)},${base} ${points2svg(xy)} ${xy[xy.length - 1][0].toFixed(1)},${base}`;
  });
}

/**
 * The part of a series' area above its `areaAbove` value, hatched: the area again, clipped to
 * the plot above that value and filled with a pattern of the colour its class sets (a pattern's
 * stripes take their colour from the pattern, not from the shape it fills).
 */
function AreaAbove<P extends ITimePoint>(props: {
  frame: IFrame;
  clipId: string;
  drawn: P[];
  series: ISeries<P>;
  maxGap?: number;
}): JSX.Element | null {
  const { frame, series: s } = props;
  const above = s.areaAbove;
  if (!above || !s.areaClassName || !isFinite(above.value)) {
    return null;
  }
  const { plot, y } = frame;
  const id = `${props.clipId}-${s.id}-above`;
  const top = y(above.value, sideOf(s));
  return (
    <g className="jp-vgpu-TimeSeries-above" data-series={s.id}>
      <defs>
        <clipPath id={`${id}-clip`}>
          <rect
            x={plot.x}
            y={plot.y - 2}
            width={plot.w}
            height={Math.max(0, top - plot.y + 2)}
          />
        </clipPath>
        <pattern
          id={`${id}-hatch`}
          className={above.className}
          patternUnits="userSpaceOnUse"
          width={5}
          height={5}
          patternTransform="rotate(45)"
        >
          <rect className="jp-vgpu-TimeSeries-hatch" width={2} height={5} />
        </pattern>
      </defs>
      <g clipPath={`url(#${id}-clip)`}>
        {areaPoints(frame, props.drawn, s, props.maxGap).map((points, i) => (
          <polygon
            key={i}
            className={`jp-vgpu-TimeSeries-areaAbove ${above.className}`}
            fill={`url(#${id}-hatch)`}
            points={points}
          />
        ))}
      </g>
    </g>
  );
}

/** The areas, reference lines and lines of a chart, clipped to its plot (`clipId`). */
export function Series<P extends ITimePoint>(props: {
  frame: IFrame;
  clipId: string;
  /** The points drawn: those in the window and one either side. */
  drawn: P[];
  series: ISeries<P>[];
  references: IReferenceLine[];
  maxGap?: number;
}): JSX.Element {
  const { frame, clipId, drawn, references } = props;
  const { plot, x, y } = frame;
  const series = props.series.filter(s => !s.readoutOnly);
  return (
    <g clipPath={`url(#${clipId})`}>
      {series.map(s =>
        s.areaClassName
          ? areaPoints(frame, drawn, s, props.maxGap).map((points, i) => (
              <polygon
                key={`${s.id}-area-${i}`}
                className={`jp-vgpu-TimeSeries-area ${s.areaClassName}`}
                points={points}
              />
            ))
          : null
      )}
      {series.map(s => (
        <AreaAbove
          key={`${s.id}-above`}
          frame={frame}
          clipId={clipId}
          drawn={drawn}
          series={s}
          maxGap={props.maxGap}
        />
      ))}
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
            points={points2svg(run.map(([t, v]) => [x(t), y(v, sideOf(s))]))}
          />
        ))
      )}
    </g>
  );
}
