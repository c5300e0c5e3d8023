/**
 * The GPU dashboard's timeline: every slice of a GPU over the range the charts show, live ones
 * up to now and ended ones as events, so a `jupyter vgpu run` that lived 3 s is seen although no
 * chart of it was ever drawn. One lane per slice, in the slice's colour, with its name beside it.
 */
import * as React from 'react';

import {
  commandLabel,
  formatBytes,
  formatDuration,
  kernelLabel,
  pathLabel
} from '../format/format';
import { IEndedSlice, ISliceHistory } from '../store/historyapi';
import { clockTime } from '../charts/scales';

/** The narrowest an event is drawn (px): a slice of seconds in an hour still shows. */
const MIN_WIDTH_PX = 6;

/** One lane: a slice from `start` to `end` (null: it lives on). */
export interface ILane {
  id: string;
  name: string;
  detail: string;
  start: number;
  end: number | null;
  peak: number | null;
  /** The full command or notebook path, for the tooltip. */
  full: string;
}

/** What a user calls a slice of the history: its notebook's file name, or its command. */
export function historyName(slice: ISliceHistory | IEndedSlice): {
  name: string;
  full: string;
} {
  if (slice.holder_kind === 'command') {
    const full = Array.isArray(slice.command)
      ? slice.command.join(' ')
      : (slice.command ?? '');
    return { name: commandLabel(full) || `slice ${slice.id}`, full };
  }
  const name = slice.path
    ? pathLabel(slice.path)
    : slice.kernel_id
      ? kernelLabel(slice.kernel_id)
      : `slice ${slice.id}`;
  return { name, full: slice.path ?? slice.kernel_id ?? '' };
}

/** The lanes of one GPU's slices over [start, end]: live and ended, oldest first. */
export function lanes(
  live: ISliceHistory[],
  ended: IEndedSlice[],
  start: number,
  end: number
): ILane[] {
  const out: ILane[] = [];
  for (const s of live) {
    const first = s.created ?? s.points[0]?.t;
    if (first === undefined) {
      continue;
    }
    out.push({
      ...historyName(s),
      id: s.id,
      detail: s.request_text,
      start: first,
      end: null,
      peak: null
    });
  }
  for (const s of ended) {
    if (s.ended < start || s.created > end) {
      continue; // outside the range shown
    }
    out.push({
      ...historyName(s),
      id: s.id,
      detail: s.request_text,
      start: s.created,
      end: s.ended,
      peak: s.memory_peak
    });
  }
  return out.sort((a, b) => a.start - b.start || (a.id < b.id ? -1 : 1));
}

/** "python eval.py · 1/2 GPU · 14:02:02 to 14:02:05 (about 3 s) · peak 1.0 GiB". */
export function laneTitle(lane: ILane): string {
  const when =
    lane.end === null
      ? `since ${clockTime(lane.start, true)} (running)`
      : `${clockTime(lane.start, true)} to ${clockTime(lane.end, true)} (ended; about ${formatDuration(lane.end - lane.start)})`;
  const parts = [lane.full || lane.name, lane.detail, when];
  if (lane.peak !== null) {
    parts.push(`peak ${formatBytes(lane.peak)}`);
  }
  return `${parts.join(' · ')}\nslice ${lane.id}`;
}

/** The timeline of one GPU's slices over [start, end] (seconds, the server's clock). */
export function SliceTimeline(props: {
  gpuIndex: number;
  live: ISliceHistory[];
  ended: IEndedSlice[];
  start: number;
  end: number;
  colour: (sliceId: string) => number;
}): JSX.Element | null {
  const { start, end, colour } = props;
  const shown = lanes(props.live, props.ended, start, end);
  if (shown.length === 0 || !(end > start)) {
    return null;
  }
  const at = (t: number) =>
    Math.min(100, Math.max(0, ((t - start) / (end - start)) * 100));
  return (
    <section
      className="jp-vgpu-Timeline"
      aria-label={`Slices on GPU ${props.gpuIndex} over time`}
    >
      <h3 className="jp-vgpu-Dashboard-slicesTitle">
        Slices over time on GPU {props.gpuIndex}
      </h3>
      <ol className="jp-vgpu-Timeline-lanes">
        {shown.map(lane => {
          const left = at(lane.start);
          const right = at(lane.end ?? end);
          const title = laneTitle(lane);
          return (
            <li
              key={lane.id}
              className={`jp-vgpu-Timeline-lane jp-vgpu-colour-${colour(lane.id)}${lane.end === null ? '' : ' jp-vgpu-mod-ended'}`}
              data-slice-id={lane.id}
              title={title}
            >
              <span className="jp-vgpu-Timeline-name">
                <span className="jp-vgpu-Timeline-holder">{lane.name}</span>{' '}
                <span className="jp-vgpu-Timeline-detail">
                  {lane.detail}
                  {lane.end === null
                    ? ''
                    : ` · ended ${clockTime(lane.end, true)}`}
                </span>
              </span>
              <span className="jp-vgpu-Timeline-track">
                <span
                  className="jp-vgpu-Timeline-bar"
                  style={{
                    left: `min(${left.toFixed(3)}%, calc(100% - ${MIN_WIDTH_PX}px))`,
                    width: `max(${MIN_WIDTH_PX}px, ${(right - left).toFixed(3)}%)`
                  }}
                  role="img"
                  aria-label={title}
                />
              </span>
            </li>
          );
        })}
      </ol>
    </section>
  );
}
