/**
 * A time-series chart's series: the filled areas under those that have one, the reference lines
 * (a reservation, a power limit), and each series as lines broken where a value is unknown.
 */
import * as React from 'react';

import { IFrame, sideOf } from './axes';
import { IReferenceLine, ISeries, ITimePoint, segments } from './scales';

function points2svg(run: [number, number][]): string {
  return run.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
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
  const { frame, clipId, drawn, series, references } = props;
  const { plot, x, y } = frame;
  return (
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
            points={points2svg(run.map(([t, v]) => [x(t), y(v, sideOf(s))]))}
          />
        ))
      )}
    </g>
  );
}
