/**
 * The maths of the time-series chart: its value scales and units, the time axis, gaps, the
 * window and the nearest point the readout shows.
 */
import {
  AXES,
  bytesTick,
  clockTime,
  formatRate,
  nearestIndex,
  niceStep,
  pointsInWindow,
  segments,
  timeTicks,
  valueScale
} from '../charts/scales';

const GiB = 1024 ** 3;

/** A round start time: 2023-11-14 22:13:20 UTC. */
const T0 = 1700000000;

function point(t: number, used: number | null, util: number | null) {
  return { t, used, util };
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
});
