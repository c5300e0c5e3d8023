/**
 * The time-series chart as drawn: its time axis, gaps, the window, the readout, the zoomed window,
 * reference lines; and the sidebar's HistoryChart drawn with it.
 */
import * as React from 'react';

import { IHistoryPoint } from '../store/api';
import { HistoryChart } from '../sidebar/chart';
import { formatBytes, formatPercent } from '../format/format';
import { AXES, clockTime, ISeries } from '../charts/scales';
import { ITimeSeriesProps, TimeSeries } from '../charts/timeseries';
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

describe('the time axis', () => {
  it('is drawn with clock labels under the plot', () => {
    const html = render(chart({ start: T0, end: T0 + 600 }));
    const labels = tags(html, 'g', 'jp-vgpu-mod-time').length;
    expect(labels).toBe(1);
    const ticks = texts(html, 'jp-vgpu-TimeSeries-tick');
    expect(ticks.filter(t => /^\d\d:\d\d$/.test(t)).length).toBeGreaterThan(1);
  });
});

describe('gaps', () => {
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

describe('a series hatched above a value', () => {
  const request = {
    id: 'request',
    label: 'request',
    value: 2 * GiB,
    format: formatBytes,
    className: 'request'
  };
  const hatched: ISeries<IHistoryPoint>[] = [
    { ...SERIES[0], areaAbove: { value: 2 * GiB, className: 'burst' } },
    {
      id: 'burst',
      label: 'burst',
      value: p => (p.used === null ? null : Math.max(0, p.used - 2 * GiB)),
      format: formatBytes,
      className: 'burst',
      readoutOnly: true
    },
    SERIES[1]
  ];

  it('draws its area again above the value, clipped there and filled with a hatch', () => {
    const html = render(chart({ series: hatched, references: [request] }));
    const [group] = tags(html, 'g', 'jp-vgpu-TimeSeries-above');
    expect(attr(group, 'data-series')).toBe('used');
    const above = tags(html, 'polygon', 'jp-vgpu-TimeSeries-areaAbove');
    expect(above).toHaveLength(1);
    expect(above[0]).toContain('burst');
    expect(attr(above[0], 'points')).toBe(
      attr(tags(html, 'polygon', 'used-area')[0], 'points')
    );
    const hatch = /url\(#([^)]+)\)/.exec(attr(above[0], 'fill') ?? '')![1];
    const [pattern] = tags(html, 'pattern', 'burst');
    expect(attr(pattern, 'id')).toBe(hatch);
    // The clip ends where the request's line crosses the plot.
    const clip = html.slice(
      html.indexOf(`id="${hatch.replace(/hatch$/, 'clip')}"`)
    );
    const rect = /<rect[^>]*>/.exec(clip)![0];
    const [line] = tags(html, 'line', 'request');
    expect(Number(attr(rect, 'y')) + Number(attr(rect, 'height'))).toBeCloseTo(
      Number(attr(line, 'y1')),
      1
    );
  });

  it('draws nothing above the value for a series without one', () => {
    const html = render(chart());
    expect(tags(html, 'g', 'jp-vgpu-TimeSeries-above')).toEqual([]);
    expect(tags(html, 'polygon', 'jp-vgpu-TimeSeries-areaAbove')).toEqual([]);
  });

  it('reads a readout-only series in the readout and the summary, and draws no line for it', () => {
    const html = render(chart({ series: hatched, hover: T0 + 20 }));
    expect(tags(html, 'polyline', 'burst')).toEqual([]);
    expect(tags(html, 'circle', 'jp-vgpu-TimeSeries-dot')).toHaveLength(2);
    expect(texts(html, 'jp-vgpu-TimeSeries-readoutRow')).toEqual([
      'used3.0 GiB',
      'burst1.0 GiB',
      'util30%'
    ]);
    const [svg] = tags(html, 'svg', 'jp-vgpu-TimeSeries-svg');
    expect(unescape(attr(svg, 'aria-label') ?? '')).toContain(
      'burst 0 B to 1.0 GiB, latest 0 B'
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

  it('says a clock time even when its ticks fall at both ends of the window', () => {
    // 61 s of history from 1 s before a minute: the window's two minute ticks are at its ends,
    // where a centred label has no room (the panel's chart once showed no time at all).
    const minute = Math.ceil(T0 / 60) * 60;
    const history = [point(minute - 1, GiB, 10), point(minute + 60, GiB, 20)];
    const html = render(
      <HistoryChart
        points={history}
        reserved={null}
        now={minute + 60}
        subject="GPU 0"
      />
    );
    const times = texts(html, 'jp-vgpu-TimeSeries-tick').filter(t =>
      /^\d\d:\d\d(:\d\d)?$/.test(t)
    );
    expect(times).toHaveLength(1);
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
