/**
 * A time-series chart's hover: the rule and dots at the point read (in the plot) and the readout
 * beside it (its time, each series' value, the reference lines), and the keys that move it.
 */
import * as React from 'react';

import { IFrame, sideOf } from './axes';
import { clockTime, IReferenceLine, ISeries, ITimePoint } from './scales';

/** The rule and a dot per series at the point read. */
export function HoverMarks<P extends ITimePoint>(props: {
  frame: IFrame;
  at: P;
  series: ISeries<P>[];
}): JSX.Element {
  const { frame, series } = props;
  const { plot, y } = frame;
  const hovered = props.at;
  const readoutX = frame.x(hovered.t);
  return (
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
        return !s.readoutOnly && typeof v === 'number' && isFinite(v) ? (
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
  );
}

/** The readout of the point read, on the side of the rule with more room; hidden when none. */
export function Readout<P extends ITimePoint>(props: {
  frame: IFrame;
  width: number;
  at: P | null;
  series: ISeries<P>[];
  references: IReferenceLine[];
}): JSX.Element {
  const { frame, width, series, references } = props;
  const { plot } = frame;
  const hovered = props.at;
  const readoutX = hovered ? frame.x(hovered.t) : 0;
  const readoutOnLeft = readoutX > plot.x + plot.w / 2;
  return (
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
              <span className="jp-vgpu-TimeSeries-readoutLabel">{s.label}</span>
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
  );
}

/**
 * The index of the point the keys move the readout to (arrows: one point, ten with Shift; Home,
 * End), from `index` (-1: none yet); null for Escape (no readout), undefined for another key.
 */
export function keyedIndex(
  key: string,
  shift: boolean,
  index: number,
  count: number
): number | null | undefined {
  const current = index >= 0 ? index : count - 1;
  const stride = shift ? 10 : 1;
  let next: number;
  switch (key) {
    case 'ArrowLeft':
      next = index < 0 ? current : current - stride;
      break;
    case 'ArrowRight':
      next = index < 0 ? current : current + stride;
      break;
    case 'Home':
      next = 0;
      break;
    case 'End':
      next = count - 1;
      break;
    case 'Escape':
      return null;
    default:
      return undefined;
  }
  return Math.min(count - 1, Math.max(0, next));
}
