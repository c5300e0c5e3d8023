/**
 * One chart of the GPU dashboard: its title (or a heading of the caller's), a legend of the
 * latest values, and the time series itself.
 */
import * as React from 'react';

import { ITimePoint } from '../charts/scales';
import { TimeSeries } from '../charts/timeseries';
import { IChartSpec } from './dashboardcharts';

/** The height of a chart, in pixels. */
const CHART_HEIGHT = 180;

/** A chart with its title and a legend of the latest values. */
export function ChartCard<P extends ITimePoint>(props: {
  spec: IChartSpec<P>;
  start: number;
  end: number;
  maxGap: number;
  /** Dragging across the chart zooms to the range; without it, no zoom. */
  onZoom?: (start: number, end: number) => void;
  className?: string;
  heading?: React.ReactNode;
  attributes?: { [name: string]: string };
}): JSX.Element {
  const { spec, start, end } = props;
  const latest = spec.points.length
    ? spec.points[spec.points.length - 1]
    : null;
  return (
    <figure
      className={`jp-vgpu-Dashboard-chart ${props.className ?? ''}`}
      data-chart={spec.kind}
      {...props.attributes}
    >
      <figcaption className="jp-vgpu-Dashboard-chartCaption">
        {props.heading ?? (
          <span className="jp-vgpu-Dashboard-chartTitle">
            {spec.title}
            {spec.note && (
              <span className="jp-vgpu-Dashboard-chartNote"> {spec.note}</span>
            )}
          </span>
        )}
        <span className="jp-vgpu-Dashboard-legend">
          {spec.series.map(s => (
            <span
              key={s.id}
              className="jp-vgpu-Dashboard-key"
              data-series={s.id}
            >
              <span className={`jp-vgpu-TimeSeries-swatch ${s.className}`} />
              {s.label} {s.format(latest ? s.value(latest) : null)}
            </span>
          ))}
          {(spec.references ?? []).map(r =>
            typeof r.value === 'number' ? (
              <span
                key={r.id}
                className="jp-vgpu-Dashboard-key"
                data-series={r.id}
              >
                <span
                  className={`jp-vgpu-TimeSeries-swatch jp-vgpu-mod-reference ${r.className}`}
                />
                {r.label} {r.format(r.value)}
              </span>
            ) : null
          )}
        </span>
      </figcaption>
      <TimeSeries
        points={spec.points}
        series={spec.series}
        references={spec.references}
        start={start}
        end={end}
        left={spec.left}
        right={spec.right}
        subject={spec.subject}
        height={CHART_HEIGHT}
        width={360}
        maxGap={props.maxGap}
        onZoom={props.onZoom}
        className="jp-vgpu-Dashboard-plot"
      />
    </figure>
  );
}
