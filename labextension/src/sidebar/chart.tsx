/**
 * A small history chart (a `TimeSeries`): memory used over the last minutes (a line over a
 * pale area, its values on the left axis), the reservation as a dashed horizontal line,
 * utilisation (0-100 %, right axis) as a second, thinner line; a hover readout and axis values.
 */
import * as React from 'react';

import { IHistoryPoint } from '../store/api';
import { formatBytes, formatPercent } from '../format/format';
import { HISTORY_SECONDS } from '../store/model';
import { AXES, ISeries } from '../charts/scales';
import { TimeSeries } from '../charts/timeseries';

/** The chart's height in pixels, its axes included. */
const HEIGHT = 96;
/** The shortest time axis, in seconds. */
const MIN_WINDOW = 60;

const SERIES: ISeries<IHistoryPoint>[] = [
  {
    id: 'used',
    label: 'used',
    value: p => p.used,
    format: formatBytes,
    className: 'jp-vgpu-Chart-used',
    areaClassName: 'jp-vgpu-Chart-area'
  },
  {
    id: 'util',
    label: 'util',
    value: p => p.util,
    format: formatPercent,
    className: 'jp-vgpu-Chart-util',
    axis: 'right'
  }
];

/** "5 min", "90 s". */
function spanText(seconds: number): string {
  return seconds >= 120
    ? `${Math.round(seconds / 60)} min`
    : `${Math.round(seconds)} s`;
}

export interface IHistoryChartProps {
  /** Oldest first. */
  points: IHistoryPoint[];
  /** The reservation (bytes), drawn as a dashed line; null for none. */
  reserved: number | null;
  /** The top of the memory scale when it is known (a GPU's total memory). */
  total?: number | null;
  /** Now, on the server's clock: the chart's right edge. */
  now: number;
  /** The colour class of the memory series (`jp-vgpu-colour-<n>`), if any. */
  colourClass?: string;
  /** What the chart is of ("train.ipynb", "GPU 0"). */
  subject: string;
  /**
   * The latest figures (what the card or row beside the chart shows), for the legend; without
   * them (or for a figure left undefined) the legend shows the last history point.
   */
  current?: { used?: number | null; util?: number | null };
}

/** Memory used and utilisation of one slice or GPU over the last `HISTORY_SECONDS`. */
export function HistoryChart(props: IHistoryChartProps): JSX.Element {
  const { points, reserved, total, subject, current } = props;
  const now = Math.max(
    props.now,
    points.length ? points[points.length - 1].t : 0
  );
  const kept = points.filter(p => p.t >= now - HISTORY_SECONDS);
  // The time axis spans what is known, at least a minute and at most HISTORY_SECONDS, so a
  // new slice's first points do not huddle at the right edge.
  const window = Math.min(
    HISTORY_SECONDS,
    Math.max(MIN_WINDOW, kept.length ? now - kept[0].t : 0)
  );
  const last = kept.length ? kept[kept.length - 1] : null;
  const used = current?.used !== undefined ? current.used : last?.used;
  const util = current?.util !== undefined ? current.util : last?.util;
  return (
    <figure
      className={`jp-vgpu-Chart ${props.colourClass ?? ''}`}
      aria-label={`${subject}: memory and utilisation over the last ${spanText(window)}`}
    >
      <TimeSeries
        points={kept}
        series={SERIES}
        references={
          reserved
            ? [
                {
                  id: 'reserved',
                  label: 'reserved',
                  value: reserved,
                  format: formatBytes,
                  className: 'jp-vgpu-Chart-reserved'
                }
              ]
            : []
        }
        start={now - window}
        end={now}
        left={AXES.bytes(total ?? null)}
        right={AXES.percent()}
        subject={subject}
        height={HEIGHT}
        width={240}
        className="jp-vgpu-Chart-series"
        plotClassName={`jp-vgpu-Chart-plot ${props.colourClass ?? ''}`}
      />
      <figcaption className="jp-vgpu-Chart-legend">
        <span className="jp-vgpu-Chart-key jp-vgpu-mod-used">
          used {formatBytes(used)}
        </span>
        {reserved ? (
          <span className="jp-vgpu-Chart-key jp-vgpu-mod-reserved">
            reserved {formatBytes(reserved)}
          </span>
        ) : null}
        <span className="jp-vgpu-Chart-key jp-vgpu-mod-util">
          util {formatPercent(util)}
        </span>
        <span className="jp-vgpu-Chart-span">
          {kept.length > 1 ? `last ${spanText(window)}` : 'collecting…'}
        </span>
      </figcaption>
    </figure>
  );
}
