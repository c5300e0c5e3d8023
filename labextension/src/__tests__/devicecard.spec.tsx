/**
 * A GPU card in a pod's share (or a Slurm job's shards), its utilisation sparkline, and its bar
 * where an elastic slice bursts (issue 42, "Showing"): the burst hatched after the slice's
 * request, counted once, said in the bar's tooltip and the card's figures; the legend's keys.
 */
import * as React from 'react';

import { IDevice, ISlice } from '../store/api';
import { BarLegend } from '../sidebar/bars';
import { DeviceCard, FREE_TITLE, podShareTitle } from '../sidebar/devicecard';
import { IHistorySource, ISliceActions } from '../sidebar/slicerow';
import { makeSlice } from './fixtures';
import { attr, render, tags, texts } from './render';

jest.mock('@jupyterlab/ui-components', () =>
  jest.requireActual('./mocks').uiComponents()
);
jest.mock('../icons', () => jest.requireActual('./mocks').icons());
jest.mock('@jupyterlab/apputils', () => ({
  Dialog: { okButton: () => ({}) },
  showDialog: jest.fn(),
  Notification: { warning: jest.fn(), info: jest.fn(), dismiss: jest.fn() }
}));

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const T0 = 1700000000;

/** Plain history: no points. */
const history: IHistorySource = {
  slice: () => [],
  device: () => [],
  now: () => T0
};

function actions(keep = jest.fn()): ISliceActions {
  return {
    openNotebook: jest.fn(),
    kernelDisplayName: s => s.kernel_display_name ?? 'kernel',
    shutdownKernel: jest.fn(),
    releaseSlice: jest.fn(),
    copySliceId: jest.fn(),
    keepSlice: keep
  };
}

function device(fields: Partial<IDevice> = {}): IDevice {
  return {
    index: 0,
    uuid: 'GPU-0',
    name: 'Tesla T4',
    memory_total: 4 * GiB,
    memory_used: 0,
    memory_reserved: 0,
    memory_used_by_slices: 0,
    memory_over_use: 0,
    memory_foreign: 0,
    memory_free: 4 * GiB,
    utilization: 0,
    mig_mode: false,
    tier: 'cooperative',
    slices: [],
    ...fields
  };
}

describe("a GPU card in a pod's share", () => {
  const shared = device({
    pod_share: "this pod's share: 4.0 GiB of 16.0 GiB (HAMi)",
    card_memory: 16 * GiB,
    sm_limit: 50
  });

  function card(shown: IDevice): string {
    return render(
      <DeviceCard
        device={shown}
        slices={[]}
        colour={() => 0}
        actions={actions()}
        history={history}
      />
    );
  }

  it('shows the share under the name, muted', () => {
    const html = card(shared);
    expect(texts(html, 'jp-vgpu-DeviceCard-podShare')).toEqual([
      "this pod's share: 4.0 GiB of 16.0 GiB (HAMi)"
    ]);
    const line = tags(html, 'div', 'jp-vgpu-DeviceCard-podShare')[0];
    expect(attr(line, 'title')).toContain('The card itself has 16.0 GiB.');
  });

  it('says what the share means', () => {
    expect(podShareTitle(shared).split('\n')).toEqual([
      "This server runs in a pod that a scheduler placed on a shared GPU: 4.0 GiB is the pod's share, and slices are fractions of it.",
      'The card itself has 16.0 GiB.',
      "The pod may use 50% of the card's SMs."
    ]);
  });

  it("says a Slurm job's shards the same way", () => {
    const job = device({
      memory_total: 8 * GiB,
      share: 'Slurm job 1234: 16/32 shards of GPU 0, 8.0 GiB',
      slurm_job: '1234',
      card_memory: 16 * GiB
    });
    const html = card(job);
    expect(texts(html, 'jp-vgpu-DeviceCard-podShare')).toEqual([
      'Slurm job 1234: 16/32 shards of GPU 0, 8.0 GiB'
    ]);
    expect(podShareTitle(job).split('\n')).toEqual([
      "This server runs in Slurm job 1234: 8.0 GiB is the job's share of the GPU, and slices are fractions of it.",
      'The card itself has 16.0 GiB.'
    ]);
  });

  it('shows nothing of the kind outside such a pod', () => {
    for (const d of [device(), device({ pod_share: null })]) {
      const html = card(d);
      expect(tags(html, 'div', 'jp-vgpu-DeviceCard-podShare')).toEqual([]);
    }
  });
});

describe("a GPU card's utilisation sparkline", () => {
  function card(points: { t: number; util: number | null }[]): string {
    const source: IHistorySource = {
      ...history,
      device: uuid =>
        uuid === 'GPU-0' ? points.map(p => ({ ...p, used: 0 })) : []
    };
    return render(
      <DeviceCard
        device={device()}
        slices={[]}
        colour={() => 0}
        actions={actions()}
        history={source}
      />
    );
  }

  it("draws the utilisation of the GPU's history (the server sends it once)", () => {
    const html = card([
      { t: 1, util: 0 },
      { t: 2, util: 100 }
    ]);
    expect(tags(html, 'svg', 'jp-vgpu-Sparkline')).toHaveLength(1);
    expect(html).toContain('<polyline points="0.0,15.0 60.0,1.0"></polyline>');
  });

  it('draws nothing before the history has two points', () => {
    expect(
      tags(card([{ t: 1, util: 50 }]), 'svg', 'jp-vgpu-Sparkline')
    ).toEqual([]);
  });
});

/** A 16 GiB GPU as `GET /api/vgpu/devices` sends it with `slices` on it using `used` each. */
function gpuWith(slices: ISlice[], fields: Partial<IDevice> = {}): IDevice {
  const reserved = slices.reduce((sum, s) => sum + (s.memory_reserved ?? 0), 0);
  const over = slices.reduce(
    (sum, s) =>
      sum + Math.max(0, (s.memory_used ?? 0) - (s.memory_reserved ?? 0)),
    0
  );
  return device({
    memory_total: 16 * GiB,
    memory_used: slices.reduce((sum, s) => sum + (s.memory_used ?? 0), 0),
    memory_reserved: reserved,
    memory_over_use: over, // the server's: bursts included
    memory_free: 16 * GiB - reserved - over,
    slices: slices.map(s => s.id),
    ...fields
  });
}

/** A kernel's 1/4 GPU slice "up to 1/2" of the 16 GiB GPU, using `used` (tests/server/test_elastic.py). */
function elastic(used: number, fields: Partial<ISlice> = {}): ISlice {
  return makeSlice({
    id: 'elastic',
    path: 'work/burst.ipynb',
    kernel_display_name: 'Python 3 (1/4 GPU, up to 1/2)',
    request_text: '1/4 GPU, up to 1/2',
    memory_reserved: 4 * GiB,
    context_allowance: 300 * MiB,
    memory_limit: 4 * GiB - 300 * MiB,
    memory_burst_limit: 8 * GiB - 300 * MiB,
    memory_used: used,
    memory_burst: Math.max(0, Math.min(used, 8 * GiB) - 4 * GiB),
    ...fields
  });
}

/** A fixed 1/4 GPU slice using 1 GiB. */
const fixed = makeSlice({
  id: 'fixed',
  path: 'work/fixed.ipynb',
  memory_used: 1 * GiB
});

function cardOf(gpu: IDevice, slices: ISlice[]): string {
  return render(
    <DeviceCard
      device={gpu}
      slices={slices}
      colour={id => (id === 'elastic' ? 1 : 2)}
      actions={actions()}
      history={history}
    />
  );
}

/** The numbers of an inline style's `width` (percent) of each `div` of class `className`. */
function widths(html: string, className: string): number[] {
  return tags(html, 'div', className).map(tag => {
    const match = /width:\s*([0-9.]+)%/.exec(attr(tag, 'style') ?? '');
    return match ? Number(match[1]) : NaN;
  });
}

/** The opening tag of a slice's part of the GPU's bar. */
function segment(html: string, id: string): string {
  return tags(html, 'div', 'jp-vgpu-DeviceBar-slice').filter(
    t => attr(t, 'data-slice-id') === id
  )[0];
}

describe("a GPU card's bar where an elastic slice bursts", () => {
  const slices = [elastic(6 * GiB), fixed];
  const gpu = gpuWith(slices);
  const html = cardOf(gpu, slices);

  it("draws the burst hatched after the slice's request, as part of the slice's colour", () => {
    // 4 GiB requested + 2 GiB burst of 16 GiB; within it, the request solid, the burst after it.
    expect(widths(html, 'jp-vgpu-DeviceBar-slice')).toEqual([37.5, 25]);
    const part = segment(html, 'elastic');
    expect(part).toContain('jp-vgpu-colour-1');
    expect(part).toContain('jp-vgpu-mod-bursting');
    expect(part).not.toContain('jp-vgpu-mod-over');
    expect(widths(html, 'jp-vgpu-DeviceBar-used')).toEqual([66.667, 25]);
    expect(widths(html, 'jp-vgpu-DeviceBar-burst')).toEqual([33.333]);
    expect(attr(part, 'title')).toBe(
      'burst.ipynb: 6.0 GiB used of 4.0 GiB requested, up to 8.0 GiB; 2.0 GiB above the request (given back when a request waits)'
    );
    expect(attr(tags(html, 'div', 'jp-vgpu-DeviceBar-burst')[0], 'title')).toBe(
      'burst.ipynb: 2.0 GiB above its 4.0 GiB request, up to 8.0 GiB (given back when a request waits)'
    );
  });

  it('counts the burst once: what the bar leaves empty is what the server says is free', () => {
    const drawn = widths(html, 'jp-vgpu-DeviceBar-slice').reduce(
      (a, b) => a + b
    );
    expect(100 - drawn).toBeCloseTo((gpu.memory_free / gpu.memory_total) * 100);
    expect(texts(html, 'jp-vgpu-DeviceCard-free')).toEqual([
      '6.0 GiB free to reserve'
    ]);
  });

  it('says what bursting kernels hold, and that it comes back when a request waits', () => {
    const bar = tags(html, 'div', 'jp-vgpu-DeviceBar')[0];
    const said =
      'GPU 0: 8.0 GiB reserved, 2.0 GiB held above requests by bursting kernels (given back when a request waits), 0 B used by other processes, of 16.0 GiB';
    expect(attr(bar, 'aria-label')).toBe(said);
    expect(attr(bar, 'title')).toBe(said);
    expect(texts(html, 'jp-vgpu-DeviceCard-burst')).toEqual(['2.0 GiB burst']);
    expect(
      attr(tags(html, 'span', 'jp-vgpu-DeviceCard-burst')[0], 'title')
    ).toBe(
      '2.0 GiB held above requests by bursting kernels (given back when a request waits).'
    );
    expect(
      attr(tags(html, 'span', 'jp-vgpu-DeviceCard-free')[0], 'title')
    ).toBe(
      `${FREE_TITLE}\nNot free either: 2.0 GiB held above requests by bursting kernels (given back when a request waits).`
    );
  });

  it('reads as a fixed slice while the elastic one stays within its request', () => {
    const within = [elastic(1 * GiB), fixed];
    const calm = cardOf(gpuWith(within), within);
    expect(widths(calm, 'jp-vgpu-DeviceBar-slice')).toEqual([25, 25]);
    expect(widths(calm, 'jp-vgpu-DeviceBar-used')).toEqual([25, 25]);
    expect(tags(calm, 'div', 'jp-vgpu-DeviceBar-burst')).toEqual([]);
    expect(tags(calm, 'span', 'jp-vgpu-DeviceCard-burst')).toEqual([]);
    expect(
      attr(tags(calm, 'span', 'jp-vgpu-DeviceCard-free')[0], 'title')
    ).toBe(FREE_TITLE);
    expect(attr(tags(calm, 'div', 'jp-vgpu-DeviceBar')[0], 'title')).toBe(
      'GPU 0: 8.0 GiB reserved, 0 B used by other processes, of 16.0 GiB'
    );
  });

  it('draws a burst only up to the limit: use beyond it is over-use', () => {
    const beyond = [elastic(10 * GiB, { state: 'over' })];
    const over = cardOf(gpuWith(beyond), beyond);
    expect(widths(over, 'jp-vgpu-DeviceBar-slice')).toEqual([50]);
    expect(widths(over, 'jp-vgpu-DeviceBar-burst')).toEqual([50]);
    expect(segment(over, 'elastic')).toContain('jp-vgpu-mod-over');
    expect(texts(over, 'jp-vgpu-DeviceCard-burst')).toEqual(['4.0 GiB burst']);
  });

  it('draws a burst asked back as the row does, and says so', () => {
    const asked = [
      elastic(6 * GiB, {
        burst_notice: {
          given: T0,
          deadline: T0 + 60,
          seconds_left: 60,
          for: '1 waiting in line',
          action: 'restart',
          burst: 2 * GiB
        }
      })
    ];
    const notice = cardOf(gpuWith(asked), asked);
    expect(segment(notice, 'elastic')).toContain('jp-vgpu-mod-givingBack');
    expect(
      attr(tags(notice, 'div', 'jp-vgpu-DeviceBar-burst')[0], 'title')
    ).toContain('(asked back now for a request that waits)');
  });

  it("says a command's burst apart: it keeps it until it ends", () => {
    const command = [
      elastic(6 * GiB, {
        holder_kind: 'command',
        kernel_id: null,
        path: null,
        command: ['python', 'train.py']
      })
    ];
    const ran = cardOf(gpuWith(command), command);
    expect(attr(tags(ran, 'div', 'jp-vgpu-DeviceBar')[0], 'title')).toContain(
      '2.0 GiB held above requests by bursting commands (theirs until they end)'
    );
    expect(attr(segment(ran, 'elastic'), 'title')).toContain(
      '(a command keeps it until it ends)'
    );
  });

  it("reads each GPU's burst from the use measured there", () => {
    const two = elastic(9 * GiB, {
      gpus: ['GPU-0', 'GPU-1'],
      gpu_indices: [0, 1],
      memory_used_by_gpu: { 'GPU-0': 7 * GiB, 'GPU-1': 2 * GiB }
    });
    const first = cardOf(gpuWith([]), [two]);
    expect(widths(first, 'jp-vgpu-DeviceBar-burst')).toEqual([42.857]); // 3 of 7 GiB
    const second = cardOf(gpuWith([], { index: 1, uuid: 'GPU-1' }), [two]);
    expect(tags(second, 'div', 'jp-vgpu-DeviceBar-burst')).toEqual([]);
  });
});

describe('the legend of the bars', () => {
  /** Each key's label and its tooltip. */
  function keys(html: string): [string, string | null][] {
    return Array.from(
      html.matchAll(/<li([^>]*)><span[^>]*><\/span>([^<]+)<\/li>/g),
      m => [m[2], attr(m[1], 'title')]
    );
  }

  it('keys the burst, hatched, and the request mark once an elastic slice is there', () => {
    const html = render(<BarLegend elastic />);
    expect(keys(html).map(([label]) => label)).toEqual([
      'used',
      'reserved',
      'burst',
      'request',
      'other processes',
      'free'
    ]);
    expect(keys(html)[2][1]).toMatch(
      /^Burst above request, given back when a request waits: /
    );
    expect(keys(html)[3][1]).toMatch(/request ends on its bar/);
    expect(html).toContain('jp-vgpu-Legend-swatch jp-vgpu-mod-burst');
    expect(html).toContain('jp-vgpu-Legend-swatch jp-vgpu-mod-request');
  });

  it('keeps its four keys without an elastic slice', () => {
    expect(keys(render(<BarLegend />)).map(([label]) => label)).toEqual([
      'used',
      'reserved',
      'other processes',
      'free'
    ]);
  });
});

describe('an over-full GPU card (hardening round five, M2)', () => {
  it('says the GPU is over-full and what happens, as `jupyter vgpu status` does', () => {
    // requests booked 12 GiB of 16 while a burst held 6 GiB above its request: 2 GiB over
    const slices = [
      elastic(10 * GiB),
      makeSlice({ id: 'late', memory_reserved: 8 * GiB, memory_used: 8 * GiB })
    ];
    const gpu = gpuWith(slices, {
      memory_used: 18 * GiB,
      memory_overbooked: 2 * GiB,
      memory_free: 0
    });
    const html = cardOf(gpu, slices);
    expect(texts(html, 'jp-vgpu-DeviceCard-overfull')).toEqual([
      'Over-full: bursts hold 2.0 GiB that requests booked; the youngest are asked back'
    ]);
    expect(
      attr(tags(html, 'div', 'jp-vgpu-DeviceCard-overfull')[0], 'role')
    ).toBe('status');
    // what the processes hold, as it is: more than the GPU has
    expect(texts(html, 'jp-vgpu-DeviceCard-memory')).toEqual([
      '18.0 / 16.0 GiB'
    ]);
  });

  it('says nothing of the kind on a GPU that is not over-full', () => {
    for (const fields of [{}, { memory_overbooked: 0 }]) {
      const html = cardOf(gpuWith([fixed], fields), [fixed]);
      expect(tags(html, 'div', 'jp-vgpu-DeviceCard-overfull')).toEqual([]);
    }
  });
});
