/**
 * A small history chart, hand-written SVG: memory used over the last minutes (a line over a
 * pale area), the reservation as a dashed horizontal line, utilisation (0-100 %) as a second,
 * thinner line on its own scale.
 */
import * as React from 'react';

import { IHistoryPoint } from './api';
import { formatBytes, formatPercent } from './format';
import { HISTORY_SECONDS } from './model';

const WIDTH = 240;
const HEIGHT = 56;
/** Leave a pixel above and below so the lines are never clipped. */
const PAD = 1.5;
/** The shortest time axis, in seconds. */
const MIN_WINDOW = 60;

/** Runs of consecutive known values as SVG point lists ("x,y x,y ..."): an unknown value breaks the line. */
function runs(
  points: IHistoryPoint[],
  value: (p: IHistoryPoint) => number | null,
  x: (t: number) => number,
  y: (v: number) => number
): string[] {
  const out: string[] = [];
  let current: string[] = [];
  for (const p of points) {
    const v = value(p);
    if (v === null || v === undefined || !isFinite(v)) {
      if (current.length > 0) {
        out.push(current.join(' '));
      }
      current = [];
      continue;
    }
    current.push(`${x(p.t).toFixed(1)},${y(v).toFixed(1)}`);
  }
  if (current.length > 0) {
    out.push(current.join(' '));
  }
  return out;
}

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
}

/** Memory used and utilisation of one slice or GPU over the last `HISTORY_SECONDS`. */
export function HistoryChart(props: IHistoryChartProps): JSX.Element {
  const { points, reserved, total, subject } = props;
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
  const start = now - window;
  const shown = kept;
  const used = shown
    .map(p => p.used)
    .filter((v): v is number => typeof v === 'number');
  const top = Math.max(
    total ?? 0,
    (reserved ?? 0) * 1.15,
    used.length ? Math.max(...used) * 1.1 : 0,
    1
  );
  const x = (t: number) => ((t - start) / window) * WIDTH;
  const yMemory = (v: number) => HEIGHT - PAD - (v / top) * (HEIGHT - 2 * PAD);
  const yUtil = (v: number) =>
    HEIGHT - PAD - (Math.min(100, Math.max(0, v)) / 100) * (HEIGHT - 2 * PAD);
  const memoryRuns = runs(shown, p => p.used, x, yMemory);
  const utilRuns = runs(shown, p => p.util, x, yUtil);
  const last = shown.length ? shown[shown.length - 1] : null;
  const label =
    shown.length === 0
      ? `${subject}: no history yet`
      : `${subject} over the last ${spanText(window)}: memory used ` +
        `${used.length ? `${formatBytes(Math.min(...used))} to ${formatBytes(Math.max(...used))}` : 'unknown'}` +
        `${reserved ? `, reserved ${formatBytes(reserved)}` : ''}` +
        `, utilisation now ${formatPercent(last?.util)}`;
  return (
    <figure className="jp-vgpu-Chart" aria-label={label}>
      <svg
        className={`jp-vgpu-Chart-plot ${props.colourClass ?? ''}`}
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        preserveAspectRatio="none"
        role="img"
        aria-label={label}
        data-points={used.length}
      >
        <title>{label}</title>
        {memoryRuns.map((run, i) => {
          const first = run.split(' ')[0].split(',')[0];
          const final = run.split(' ').slice(-1)[0].split(',')[0];
          return (
            <polygon
              key={`area-${i}`}
              className="jp-vgpu-Chart-area"
              points={`${first},${HEIGHT} ${run} ${final},${HEIGHT}`}
            />
          );
        })}
        {reserved ? (
          <line
            className="jp-vgpu-Chart-reserved"
            x1={0}
            x2={WIDTH}
            y1={yMemory(reserved)}
            y2={yMemory(reserved)}
          />
        ) : null}
        {utilRuns.map((run, i) => (
          <polyline
            key={`util-${i}`}
            className="jp-vgpu-Chart-util"
            points={run}
          />
        ))}
        {memoryRuns.map((run, i) => (
          <polyline
            key={`used-${i}`}
            className="jp-vgpu-Chart-used"
            points={run}
          />
        ))}
      </svg>
      <figcaption className="jp-vgpu-Chart-legend">
        <span className="jp-vgpu-Chart-key jp-vgpu-mod-used">
          used {formatBytes(last?.used)}
        </span>
        {reserved ? (
          <span className="jp-vgpu-Chart-key jp-vgpu-mod-reserved">
            reserved {formatBytes(reserved)}
          </span>
        ) : null}
        <span className="jp-vgpu-Chart-key jp-vgpu-mod-util">
          util {formatPercent(last?.util)}
        </span>
        <span className="jp-vgpu-Chart-span">
          {shown.length > 1 ? `last ${spanText(window)}` : 'collecting…'}
        </span>
      </figcaption>
    </figure>
  );
}
