/**
 * The time-series chart: its scales and ticks, gaps, the nearest point the readout shows, the
 * zoom a drag asks for, reference lines; and the sidebar's HistoryChart drawn with it.
 */
import * as React from 'react';

import { IHistoryPoint } from '../api';
import { HistoryChart } from '../chart';
import { formatBytes, formatPercent } from '../format';
import {
  AXES,
  bytesTick,
  clockTime,
  DragZoom,
  formatRate,
  ISeries,
  ITimeSeriesProps,
  MIN_DRAG_PX,
  nearestIndex,
  niceStep,
  pointsInWindow,
  segments,
  timeTicks,
  TimeSeries,
  valueScale
} from '../timeseries';
import { attr, render, tags, texts, unescape } from './render';

const GiB = 1024 ** 3;

/** A round start time: 2023-11-14 22:13:20 UTC. */
const T0 = 1700000000;

function point(t: number, used: number | null, util: number | null) {
  return { t, used, util };
}

const SERIES: ISeries<IHistoryPoint>[] = [
  {
    id: 'used',
    label: 'used',
    value: p => p.used,
    format: formatBytes,
    className: 'used',
    areaClassName: 'used-area'
  },
  {
    id: 'util',
    label: 'util',
    value: p => p.util,
    format: formatPercent,
    className: 'util',
    axis: 'right'
  }
];

function chart(
  props: Partial<ITimeSeriesProps<IHistoryPoint>> = {}
): React.ReactElement {
  return (
    <TimeSeries
      points={[
        point(T0, 1 * GiB, 10),
        point(T0 + 10, 2 * GiB, 20),
        point(T0 + 20, 3 * GiB, 30),
        point(T0 + 30, 2 * GiB, 40)
      ]}
      series={SERIES}
      start={T0}
      end={T0 + 60}
      left={AXES.bytes(null)}
      right={AXES.percent()}
      subject="GPU 0"
      width={400}
      height={140}
      {...props}
    />
  );
}

/** The [x, y] pairs of a polyline's `points`. */
function xy(tag: string): [number, number][] {
  return (attr(tag, 'points') ?? '')
    .split(' ')
    .filter(Boolean)
    .map(pair => pair.split(',').map(Number) as [number, number]);
}

describe('value scales', () => {
  it('step at 1, 2, 2.5, 4 or 5 times a power of ten', () => {
    expect(niceStep(0.3)).toBeCloseTo(0.4);
    expect(niceStep(7)).toBe(10);
    expect(niceStep(20)).toBe(20);
    expect(niceStep(22)).toBe(25);
    expect(niceStep(33)).toBe(40);
    expect(niceStep(0)).toBe(1);
  });

  it('keep a fixed top and prefer a step that divides it', () => {
    expect(valueScale(42, 3, { max: 100 })).toEqual({
      top: 100,
      ticks: [0, 25, 50, 75, 100]
    });
    expect(valueScale(3 * GiB, 3, { binary: true, max: 16 * GiB })).toEqual({
      top: 16 * GiB,
      ticks: [0, 4, 8, 12, 16].map(n => n * GiB)
    });
  });

  it('step by power-of-two parts of a unit on a binary axis', () => {
    const scale = valueScale(0, 5, AXES.rate());
    expect(scale.ticks.map(v => AXES.rate().tick(v))).toEqual([
      '0 B/s',
      '256 KiB/s',
      '512 KiB/s',
      '768 KiB/s',
      '1 MiB/s'
    ]);
  });

  it('end at the first tick above the values otherwise', () => {
    const scale = valueScale(3.3 * GiB, 4, { binary: true });
    expect(scale.top).toBeGreaterThanOrEqual(3.3 * GiB);
    expect(scale.ticks[0]).toBe(0);
    expect(scale.ticks[scale.ticks.length - 1]).toBe(scale.top);
    expect(scale.ticks.map(bytesTick)).toEqual([
      '0 B',
      '1 GiB',
      '2 GiB',
      '3 GiB',
      '4 GiB'
    ]);
  });

  it('have a top when nothing is known', () => {
    expect(valueScale(0, 4, { least: 50 }).top).toBeGreaterThanOrEqual(50);
    expect(valueScale(NaN, 4, {}).top).toBeGreaterThan(0);
  });

  it('read in the units of the series', () => {
    expect(bytesTick(4 * GiB)).toBe('4 GiB');
    expect(bytesTick(1.5 * GiB)).toBe('1.5 GiB');
    expect(AXES.percent().tick(50)).toBe('50%');
    expect(AXES.watts().tick(250)).toBe('250 W');
    expect(AXES.celsius().tick(60)).toBe('60 °C');
    expect(AXES.rate().tick(512 * 1024 ** 2)).toBe('512 MiB/s');
    expect(formatRate(2 * GiB)).toBe('2.0 GiB/s');
    expect(formatRate(null)).toBe('–');
  });
});

describe('the time axis', () => {
  it('labels round clock times, at most as many as fit', () => {
    const { step, ticks } = timeTicks(T0, T0 + 3600, 5);
    expect(step).toBe(900);
    expect(ticks.length).toBeGreaterThanOrEqual(4);
    expect(ticks.length).toBeLessThanOrEqual(5);
    expect(timeTicks(T0, T0 + 300, 3).step).toBe(120);
    expect(timeTicks(T0, T0 + 60, 6).step).toBe(10);
    for (const t of ticks) {
      expect(t).toBeGreaterThanOrEqual(T0);
      expect(t).toBeLessThanOrEqual(T0 + 3600);
      expect(new Date(t * 1000).getMinutes() % 15).toBe(0);
      expect(new Date(t * 1000).getSeconds()).toBe(0);
    }
    expect(ticks[1] - ticks[0]).toBe(900);
  });

  it('reads clock times', () => {
    const date = new Date(T0 * 1000);
    const two = (n: number) => String(n).padStart(2, '0');
    expect(clockTime(T0)).toBe(
      `${two(date.getHours())}:${two(date.getMinutes())}`
    );
    expect(clockTime(T0, true)).toMatch(/^\d\d:\d\d:\d\d$/);
  });

  it('is drawn with clock labels under the plot', () => {
    const html = render(chart({ start: T0, end: T0 + 600 }));
    const labels = tags(html, 'g', 'jp-vgpu-mod-time').length;
    expect(labels).toBe(1);
    const ticks = texts(html, 'jp-vgpu-TimeSeries-tick');
    expect(ticks.filter(t => /^\d\d:\d\d$/.test(t)).length).toBeGreaterThan(1);
  });
});

describe('gaps', () => {
  const points = [
    point(0, 1, 1),
    point(10, 2, null),
    point(20, null, 3),
    point(30, 4, 4),
    point(100, 5, 5)
  ];

  it('break a line where a value is unknown', () => {
    expect(segments(points, p => p.used)).toEqual([
      [
        [0, 1],
        [10, 2]
      ],
      [
        [30, 4],
        [100, 5]
      ]
    ]);
    expect(segments(points, p => p.util).length).toBe(2);
  });

  it('and where points are further apart than maxGap', () => {
    expect(segments(points, p => p.used, 35)).toEqual([
      [
        [0, 1],
        [10, 2]
      ],
      [[30, 4]],
      [[100, 5]]
    ]);
  });

  it('are drawn as separate polylines and areas', () => {
    const html = render(
      chart({
        points: [
          point(T0, GiB, 10),
          point(T0 + 10, 2 * GiB, 20),
          point(T0 + 20, null, 30),
          point(T0 + 30, 2 * GiB, 40),
          point(T0 + 40, 2 * GiB, 40)
        ]
      })
    );
    expect(tags(html, 'polyline', 'used')).toHaveLength(2);
    expect(tags(html, 'polygon', 'used-area')).toHaveLength(2);
    expect(tags(html, 'polyline', 'util')).toHaveLength(1);
  });
});

describe('the window', () => {
  it('draws one point beyond each edge and counts those inside', () => {
    const points = [0, 10, 20, 30, 40].map(t => point(t, 1, 1));
    const { drawn, inside } = pointsInWindow(points, 15, 25);
    expect(inside.map(p => p.t)).toEqual([20]);
    expect(drawn.map(p => p.t)).toEqual([10, 20, 30]);
    expect(pointsInWindow(points, 50, 60).inside).toEqual([]);
    expect(pointsInWindow(points, 50, 60).drawn.map(p => p.t)).toEqual([40]);
  });

  it('says so when it holds no point', () => {
    const html = render(chart({ points: [] }));
    expect(texts(html, 'jp-vgpu-TimeSeries-empty')).toEqual([
      'no data in this range yet'
    ]);
    expect(
      attr(tags(html, 'svg', 'jp-vgpu-TimeSeries-svg')[0], 'data-points')
    ).toBe('0');
  });

  it('puts the oldest point on the left and larger values higher', () => {
    const html = render(chart());
    const [line] = tags(html, 'polyline', 'used');
    const pairs = xy(line);
    expect(pairs).toHaveLength(4);
    const xs = pairs.map(([x]) => x);
    expect(xs).toEqual([...xs].sort((a, b) => a - b));
    expect(pairs[2][1]).toBeLessThan(pairs[0][1]); // 3 GiB above 1 GiB
  });
});

describe('the readout', () => {
  it('finds the nearest point', () => {
    const times = [0, 10, 20, 30];
    expect(nearestIndex(times, -5)).toBe(0);
    expect(nearestIndex(times, 4)).toBe(0);
    expect(nearestIndex(times, 6)).toBe(1);
    expect(nearestIndex(times, 15)).toBe(1); // a tie goes to the earlier point
    expect(nearestIndex(times, 29)).toBe(3);
    expect(nearestIndex(times, 99)).toBe(3);
    expect(nearestIndex([], 5)).toBe(-1);
  });

  it('is hidden until something is hovered', () => {
    const html = render(chart());
    const [readout] = tags(html, 'div', 'jp-vgpu-TimeSeries-readout');
    expect(readout).toContain('hidden');
    expect(tags(html, 'line', 'jp-vgpu-TimeSeries-rule')).toHaveLength(0);
  });

  it("shows the hovered point's time and each series' value there", () => {
    const html = render(chart({ hover: T0 + 19 }));
    const [readout] = tags(html, 'div', 'jp-vgpu-TimeSeries-readout');
    expect(readout).not.toContain('hidden');
    expect(texts(html, 'jp-vgpu-TimeSeries-readoutTime')).toEqual([
      clockTime(T0 + 20, true)
    ]);
    expect(texts(html, 'jp-vgpu-TimeSeries-readoutRow')).toEqual([
      'used3.0 GiB',
      'util30%'
    ]);
    const [rule] = tags(html, 'line', 'jp-vgpu-TimeSeries-rule');
    const [line] = tags(html, 'polyline', 'used');
    expect(Number(attr(rule, 'x1'))).toBeCloseTo(xy(line)[2][0], 0);
    expect(tags(html, 'circle', 'jp-vgpu-TimeSeries-dot')).toHaveLength(2);
  });

  it('is reachable from the keyboard and summarised for screen readers', () => {
    const html = render(chart());
    const [wrapper] = tags(html, 'div', 'jp-vgpu-TimeSeries');
    expect(attr(wrapper, 'tabindex')).toBe('0');
    expect(attr(wrapper, 'aria-label')).toContain('arrow keys');
    const [svg] = tags(html, 'svg', 'jp-vgpu-TimeSeries-svg');
    const label = unescape(attr(svg, 'aria-label') ?? '');
    expect(label).toContain('GPU 0');
    expect(label).toContain('used 1.0 GiB to 3.0 GiB, latest 2.0 GiB');
    expect(label).toContain('util 10% to 40%, latest 40%');
  });
});

describe('zoom', () => {
  /** 100 px of plot from x = 50: t = x - 50. */
  const timeAt = (x: number) => Math.min(100, Math.max(0, x - 50));

  it('passes the times under the two ends of a drag, earliest first', () => {
    const onZoom = jest.fn();
    const drag = new DragZoom(timeAt, onZoom);
    drag.begin(120);
    expect(drag.move(90)).toBe(true);
    expect(drag.range).toEqual([120, 90]);
    expect(drag.end(70)).toEqual([20, 70]);
    expect(onZoom).toHaveBeenCalledWith(20, 70);
    expect(drag.range).toBeNull();
    expect(drag.move(80)).toBe(false);
  });

  it('takes a click for no zoom', () => {
    const onZoom = jest.fn();
    const drag = new DragZoom(timeAt, onZoom);
    drag.begin(100);
    expect(drag.end(100 + MIN_DRAG_PX - 1)).toBeNull();
    drag.begin(100);
    drag.cancel();
    expect(drag.end(140)).toBeNull();
    expect(onZoom).not.toHaveBeenCalled();
  });

  it('clamps a drag beyond the plot to its window', () => {
    const onZoom = jest.fn();
    const drag = new DragZoom(timeAt, onZoom);
    drag.begin(10);
    drag.end(400);
    expect(onZoom).toHaveBeenCalledWith(0, 100);
  });

  it('draws only what falls in the window it is given', () => {
    const html = render(chart({ start: T0 + 15, end: T0 + 25 }));
    const [svg] = tags(html, 'svg', 'jp-vgpu-TimeSeries-svg');
    expect(attr(svg, 'data-points')).toBe('1');
    expect(attr(svg, 'data-start')).toBe(String(T0 + 15));
  });
});

describe('reference lines', () => {
  const reserved = {
    id: 'reserved',
    label: 'reserved',
    value: 4 * GiB,
    format: formatBytes,
    className: 'reserved'
  };

  it('cross the plot at their value, and count in the scale', () => {
    const html = render(chart({ references: [reserved] }));
    const [line] = tags(html, 'line', 'reserved');
    expect(line).toBeDefined();
    expect(attr(line, 'y1')).toBe(attr(line, 'y2'));
    const used = xy(tags(html, 'polyline', 'used')[0]);
    expect(Number(attr(line, 'y1'))).toBeLessThan(
      Math.min(...used.map(([, y]) => y))
    );
    const ticks = texts(html, 'jp-vgpu-TimeSeries-tick');
    expect(ticks).toContain('4 GiB');
    expect(ticks).toContain('100%');
  });

  it('are left out when unknown', () => {
    const html = render(chart({ references: [{ ...reserved, value: null }] }));
    expect(tags(html, 'line', 'reserved')).toHaveLength(0);
  });

  it('read in the readout and the summary', () => {
    const html = render(chart({ references: [reserved], hover: T0 }));
    expect(texts(html, 'jp-vgpu-TimeSeries-readoutRow')).toContain(
      'reserved4.0 GiB'
    );
    const [svg] = tags(html, 'svg', 'jp-vgpu-TimeSeries-svg');
    expect(unescape(attr(svg, 'aria-label') ?? '')).toContain(
      'reserved 4.0 GiB'
    );
  });
});

describe('HistoryChart', () => {
  const points = [
    point(T0, 0.5 * GiB, 10),
    point(T0 + 5, 1.5 * GiB, 40),
    point(T0 + 10, 3 * GiB, 90),
    point(T0 + 15, 2 * GiB, 60)
  ];

  it('keeps the classes the browser tests read', () => {
    const html = render(
      <HistoryChart
        points={points}
        reserved={4 * GiB}
        now={T0 + 15}
        subject="train.ipynb"
        colourClass="jp-vgpu-colour-2"
      />
    );
    expect(tags(html, 'figure', 'jp-vgpu-Chart')).toHaveLength(1);
    expect(tags(html, 'figure', 'jp-vgpu-colour-2')).toHaveLength(1);
    const [svg] = tags(html, 'svg', 'jp-vgpu-Chart-plot');
    expect(attr(svg, 'data-points')).toBe('4');
    const [used] = tags(html, 'polyline', 'jp-vgpu-Chart-used');
    expect(xy(used)).toHaveLength(4);
    expect(tags(html, 'polygon', 'jp-vgpu-Chart-area')).toHaveLength(1);
    expect(tags(html, 'polyline', 'jp-vgpu-Chart-util')).toHaveLength(1);
    const reserved = tags(html, 'line', 'jp-vgpu-Chart-reserved');
    expect(reserved).toHaveLength(1);
    expect(Number(attr(reserved[0], 'y1'))).toBeLessThan(
      Math.min(...xy(used).map(([, y]) => y))
    );
    expect(tags(html, 'figcaption', 'jp-vgpu-Chart-legend')).toHaveLength(1);
  });

  it('has axis values', () => {
    const html = render(
      <HistoryChart
        points={points}
        reserved={4 * GiB}
        total={16 * GiB}
        now={T0 + 15}
        subject="GPU 0"
      />
    );
    const ticks = texts(html, 'jp-vgpu-TimeSeries-tick');
    expect(ticks).toContain('16 GiB');
    expect(ticks).toContain('0 B');
    expect(ticks).toContain('100%');
  });

  it('shows the last point in its legend, or the current figures when given', () => {
    const legend = (current?: { used?: number | null; util?: number | null }) =>
      texts(
        render(
          <HistoryChart
            points={points}
            reserved={null}
            now={T0 + 15}
            subject="GPU 0"
            current={current}
          />
        ),
        'jp-vgpu-Chart-key'
      );
    expect(legend()).toEqual(['used 2.0 GiB', 'util 60%']);
    expect(legend({ used: 9.3 * GiB, util: 90 })).toEqual([
      'used 9.3 GiB',
      'util 90%'
    ]);
    expect(legend({ used: 9.3 * GiB })).toEqual(['used 9.3 GiB', 'util 60%']);
    expect(legend({ used: null, util: null })).toEqual(['used –', 'util –']);
  });

  it('says when it has no history yet', () => {
    const html = render(
      <HistoryChart points={[]} reserved={GiB} now={T0} subject="x" />
    );
    expect(texts(html, 'jp-vgpu-Chart-span')).toEqual(['collecting…']);
    expect(
      attr(tags(html, 'svg', 'jp-vgpu-Chart-plot')[0], 'data-points')
    ).toBe('0');
  });
});
