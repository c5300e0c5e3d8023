/**
 * What a newcomer reads in the panel and the status bar (issue "A newcomer's first hour"): a
 * slice's bar is used of reserved (empty when nothing is used), the legend, why a slice's use
 * is unknown, the kernel's CPU and RAM beside its GPU use, and whether the GPUs are simulated.
 */
import * as React from 'react';

import { BarLegend, DeviceBar, SliceBar } from '../sidebar/bars';
import {
  formatHost,
  SIMULATED_NOTE,
  statusText,
  statusTitle,
  usageNote,
  usedOfReserved
} from '../format/format';
import { IDevice } from '../store/api';
import { makeSlice } from './fixtures';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

const server = jest.requireActual<{
  renderToStaticMarkup: (element: React.ReactElement) => string;
}>('react-dom/server');

/** The inline width (percent) of each element with this class, in document order. */
function widths(html: string, className: string): number[] {
  const out: number[] = [];
  const pattern = new RegExp(
    `<div class="${className}" style="width:\\s*([0-9.]+)%"`,
    'g'
  );
  for (const match of html.matchAll(pattern)) {
    out.push(Number(match[1]));
  }
  return out;
}

describe('usedOfReserved', () => {
  it('is empty when nothing, or nothing known, is used', () => {
    expect(usedOfReserved(0, 4 * GiB)).toEqual({
      used: 0,
      over: 0,
      limit: 100
    });
    expect(usedOfReserved(null, 4 * GiB)).toEqual({
      used: 0,
      over: 0,
      limit: 100
    });
    expect(usedOfReserved(undefined, 4 * GiB).used).toBe(0);
  });

  it('fills the reservation as far as it is used', () => {
    expect(usedOfReserved(1.5 * GiB, 4 * GiB)).toEqual({
      used: 37.5,
      over: 0,
      limit: 100
    });
    expect(usedOfReserved(4 * GiB, 4 * GiB)).toEqual({
      used: 100,
      over: 0,
      limit: 100
    });
  });

  it('grows past the reservation and shows by how much', () => {
    const parts = usedOfReserved(5 * GiB, 4 * GiB);
    expect(parts.limit).toBeCloseTo(80);
    expect(parts.used).toBeCloseTo(80);
    expect(parts.over).toBeCloseTo(20);
  });

  it('says nothing of a slice without a reservation', () => {
    expect(usedOfReserved(GiB, 0)).toEqual({ used: 0, over: 0, limit: 100 });
  });
});

describe('SliceBar', () => {
  it('draws no fill for a slice that uses nothing', () => {
    const html = server.renderToStaticMarkup(
      <SliceBar slice={makeSlice({ memory_used: 0 })} colour={0} />
    );
    expect(widths(html, 'jp-vgpu-SliceBar-used')).toEqual([0]);
    expect(html).not.toContain('jp-vgpu-SliceBar-over');
    expect(html).toContain('aria-valuetext="0.0 / 4.0 GiB used of reserved"');
  });

  it('draws the use beyond the reservation as its own part', () => {
    const html = server.renderToStaticMarkup(
      <SliceBar
        slice={makeSlice({ memory_used: 5 * GiB, state: 'over' })}
        colour={2}
      />
    );
    expect(widths(html, 'jp-vgpu-SliceBar-used')).toEqual([80]);
    expect(widths(html, 'jp-vgpu-SliceBar-over')).toEqual([20]);
    expect(html).toContain('jp-vgpu-mod-overflow');
    expect(html).toContain('1.0 GiB over the reservation');
  });
});

describe('DeviceBar', () => {
  const device: IDevice = {
    index: 0,
    uuid: 'GPU-0',
    name: 'NVIDIA A100-SXM4-80GB',
    memory_total: 80 * GiB,
    memory_used: 0,
    memory_reserved: 0,
    memory_used_by_slices: 0,
    memory_over_use: 0,
    memory_foreign: 0,
    memory_free: 80 * GiB,
    utilization: 0,
    mig_mode: false,
    tier: 'cooperative',
    slices: []
  };

  it('has no segment at all on an empty GPU: free memory is the empty bar', () => {
    const html = server.renderToStaticMarkup(
      <DeviceBar device={device} slices={[]} colour={() => 0} />
    );
    expect(html).toMatch(/^<div class="jp-vgpu-DeviceBar"[^>]*><\/div>$/);
  });
});

describe('BarLegend', () => {
  it('names the four kinds of memory the bars show', () => {
    const html = server.renderToStaticMarkup(<BarLegend />);
    const labels = Array.from(
      html.matchAll(/<li[^>]*><span[^>]*><\/span>([^<]+)<\/li>/g),
      m => m[1]
    );
    expect(labels).toEqual(['used', 'reserved', 'other processes', 'free']);
    expect(html).toContain('jp-vgpu-Legend-swatch jp-vgpu-mod-foreign');
  });
});

describe('usageNote', () => {
  it("is the server's sentence whenever it sends one", () => {
    const note =
      'No GPU process of this kernel seen yet: its use shows once it allocates GPU memory.';
    expect(usageNote(makeSlice({ usage_note: note, state: 'unknown' }))).toBe(
      note
    );
    expect(usageNote(makeSlice({ usage_note: 'Measured by NVML.' }))).toBe(
      'Measured by NVML.'
    );
  });

  it('says why the use is unknown when an older server does not', () => {
    expect(usageNote(makeSlice({ state: 'unknown' }))).toMatch(
      /^No GPU process of this kernel seen yet/
    );
    expect(
      usageNote(makeSlice({ state: 'unknown', holder_kind: 'command' }))
    ).toMatch(/^No GPU process of this command seen yet/);
    expect(usageNote(makeSlice({ usage_note: null, state: 'ok' }))).toBeNull();
    expect(usageNote(makeSlice({ usage_note: '  ', state: 'ok' }))).toBeNull();
  });
});

describe('formatHost', () => {
  it('reads CPU and RAM as the status bar shows them', () => {
    expect(
      formatHost({
        cpu_percent: 12.3,
        memory_rss: 310 * MiB,
        memory_total: 23.4 * GiB,
        cpu_count: 16
      })
    ).toBe('CPU 12 % · RAM 310 MiB of 23.4 GiB');
  });

  it('names the cores when the kernel uses more than one', () => {
    expect(
      formatHost({
        cpu_percent: 180,
        memory_rss: null,
        memory_total: null,
        cpu_count: 16
      })
    ).toBe('CPU 180 % of 16 cores');
  });

  it('leaves out what is unknown, and is null when nothing is known', () => {
    expect(
      formatHost({
        cpu_percent: null,
        memory_rss: GiB,
        memory_total: null,
        cpu_count: null
      })
    ).toBe('RAM 1.0 GiB');
    expect(
      formatHost({
        cpu_percent: null,
        memory_rss: null,
        memory_total: null,
        cpu_count: null
      })
    ).toBeNull();
    expect(formatHost(null)).toBeNull();
    expect(formatHost(undefined)).toBeNull();
  });
});

describe('the status bar item', () => {
  const slice = makeSlice({ id: 'abc123', memory_used: 1.5 * GiB });

  it('says the GPU use of the slice', () => {
    expect(statusText(slice)).toBe('GPU 1.5 / 4.0 GiB');
  });

  it("puts the kernel's CPU and RAM beside the GPU use in its tooltip", () => {
    const title = statusTitle(
      slice,
      {
        cpu_percent: 12,
        memory_rss: 310 * MiB,
        memory_total: 23.4 * GiB,
        cpu_count: 8
      },
      false
    );
    const lines = title.split('\n');
    expect(lines[0]).toBe(
      'GPU 1.5 / 4.0 GiB used of reserved: 1/4 GPU, slice abc123 (cooperative)'
    );
    expect(lines[1]).toBe('CPU 12 % · RAM 310 MiB of 23.4 GiB');
    expect(title).not.toContain('simulated');
    expect(lines[lines.length - 1]).toBe('Click to show the GPUs panel.');
  });

  it('does without the host, and says when the GPUs are simulated', () => {
    const title = statusTitle(slice, undefined, true);
    expect(title).not.toContain('CPU');
    expect(title).toContain(SIMULATED_NOTE);
  });

  it('says why the use is unknown', () => {
    const title = statusTitle(
      makeSlice({ state: 'unknown', usage_note: 'Not measured yet.' }),
      null,
      false
    );
    expect(title.split('\n')).toContain('Not measured yet.');
  });
});
