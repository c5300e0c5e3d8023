/**
 * An elastic slice (issue 42, "Showing"): a request, booked and guaranteed, and a limit it may
 * burst to. Its bar is the limit, the use within the request solid, the burst above it hatched,
 * a mark where the request ends; its row reads "6.1 GiB of up to 8.0 GiB (4.0 GiB guaranteed)";
 * the status bar says request, limit and burst. A fixed slice reads as before.
 */
import * as React from 'react';

import { statusText, statusTitle } from '../format/format';
import { SliceBar } from '../sidebar/bars';
import { IHistorySource, ISliceActions, SliceRow } from '../sidebar/slicerow';
import { ISlice } from '../store/api';
import { makeSlice } from './fixtures';
import { attr, render, tags, texts } from './render';

jest.mock('@jupyterlab/ui-components', () =>
  jest.requireActual('./mocks').uiComponents()
);
jest.mock('../icons', () => jest.requireActual('./mocks').icons());

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
/** What the server keeps for the CUDA context (a real row's `context_allowance`). */
const CONTEXT = 300 * MiB;

/**
 * A 1/4 GPU slice "up to 1/2" of a 16 GiB GPU, as `GET /api/vgpu/slices` sends it
 * (tests/server/test_elastic.py): 4 GiB booked, frameworks may grow to 8 GiB less the context.
 */
function elasticSlice(fields: Partial<ISlice> = {}): ISlice {
  return makeSlice({
    kernel_display_name: 'Python 3 (1/4 GPU, up to 1/2)',
    request: { fraction: 0.25, memory: null, gpus: 1, limit_fraction: 0.5 },
    request_text: '1/4 GPU, up to 1/2',
    memory_reserved: 4 * GiB,
    context_allowance: CONTEXT,
    memory_limit: 4 * GiB - CONTEXT,
    memory_burst_limit: 8 * GiB - CONTEXT,
    ...fields
  });
}

/** The numbers of an inline style property (percent) of each `div` of class `className`. */
function styleOf(html: string, className: string, property: string): number[] {
  return tags(html, 'div', className).map(tag => {
    const style = attr(tag, 'style') ?? '';
    const match = new RegExp(`${property}:\\s*([0-9.]+)%`).exec(style);
    return match ? Number(match[1]) : NaN;
  });
}

const actions: ISliceActions = {
  openNotebook: () => undefined,
  kernelDisplayName: slice => slice.kernel_display_name ?? '',
  shutdownKernel: () => undefined,
  releaseSlice: () => undefined,
  copySliceId: () => undefined,
  keepSlice: () => undefined
};
const history: IHistorySource = {
  slice: () => [],
  device: () => [],
  now: () => 0
};

function row(slice: ISlice): string {
  return render(
    <SliceRow slice={slice} colour={1} actions={actions} history={history} />
  );
}

describe("an elastic slice's bar", () => {
  it('is its limit: the use within the request solid, the burst above it hatched, the request marked', () => {
    const html = render(
      <SliceBar slice={elasticSlice({ memory_used: 6 * GiB })} colour={1} />
    );
    expect(styleOf(html, 'jp-vgpu-SliceBar-used', 'width')).toEqual([50]);
    expect(styleOf(html, 'jp-vgpu-SliceBar-burst', 'width')).toEqual([25]);
    expect(styleOf(html, 'jp-vgpu-SliceBar-request', 'left')).toEqual([50]);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar-over')).toEqual([]);
    const bar = tags(html, 'div', 'jp-vgpu-SliceBar')[0];
    expect(bar).toContain('jp-vgpu-mod-bursting');
    expect(attr(bar, 'aria-valuemax')).toBe(String(8 * GiB));
    expect(attr(bar, 'aria-valuetext')).toBe(
      '6.0 GiB used of up to 8.0 GiB, 4.0 GiB guaranteed, bursting 2.0 GiB above the request'
    );
  });

  it('has no hatched part while the slice stays within its request', () => {
    const html = render(
      <SliceBar slice={elasticSlice({ memory_used: 1 * GiB })} colour={1} />
    );
    expect(styleOf(html, 'jp-vgpu-SliceBar-used', 'width')).toEqual([12.5]);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar-burst')).toEqual([]);
    expect(styleOf(html, 'jp-vgpu-SliceBar-request', 'left')).toEqual([50]);
    expect(
      attr(tags(html, 'div', 'jp-vgpu-SliceBar')[0], 'aria-valuetext')
    ).toBe('1.0 GiB used of up to 8.0 GiB, 4.0 GiB guaranteed');
  });

  it('grows past its limit only beyond it, with the limit marked', () => {
    const html = render(
      <SliceBar
        slice={elasticSlice({ memory_used: 10 * GiB, state: 'over' })}
        colour={1}
      />
    );
    expect(styleOf(html, 'jp-vgpu-SliceBar-used', 'width')).toEqual([40]);
    expect(styleOf(html, 'jp-vgpu-SliceBar-burst', 'width')).toEqual([40]);
    expect(styleOf(html, 'jp-vgpu-SliceBar-over', 'width')).toEqual([20]);
    expect(styleOf(html, 'jp-vgpu-SliceBar-request', 'left')).toEqual([40]);
    expect(styleOf(html, 'jp-vgpu-SliceBar-limit', 'left')).toEqual([80]);
    expect(
      attr(tags(html, 'div', 'jp-vgpu-SliceBar')[0], 'aria-valuetext')
    ).toContain('2.0 GiB over the limit');
  });
});

describe("a fixed slice's bar", () => {
  it('has no request mark and no burst, as before limits existed', () => {
    const html = render(
      <SliceBar slice={makeSlice({ memory_used: 3 * GiB })} colour={1} />
    );
    expect(styleOf(html, 'jp-vgpu-SliceBar-used', 'width')).toEqual([75]);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar-request')).toEqual([]);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar-burst')).toEqual([]);
    expect(
      attr(tags(html, 'div', 'jp-vgpu-SliceBar')[0], 'aria-valuetext')
    ).toBe('3.0 / 4.0 GiB used of reserved');
  });
});

describe("an elastic slice's row", () => {
  it('reads its use of up to its limit, and what is guaranteed', () => {
    const html = row(elasticSlice({ memory_used: 6.1 * GiB }));
    expect(texts(html, 'jp-vgpu-SliceRow-memory')).toEqual([
      '6.1 GiB of up to 8.0 GiB (4.0 GiB guaranteed)'
    ]);
    const title = attr(tags(html, 'li', 'jp-vgpu-SliceRow')[0], 'title');
    expect(title).toContain(
      'Request 4.0 GiB (guaranteed), limit 8.0 GiB: bursting 2.1 GiB above its request.'
    );
    expect(title).toContain('Frameworks may allocate 7.7 GiB per GPU');
  });

  it('reads the same way within its request', () => {
    const html = row(elasticSlice({ memory_used: 1.2 * GiB }));
    expect(texts(html, 'jp-vgpu-SliceRow-memory')).toEqual([
      '1.2 GiB of up to 8.0 GiB (4.0 GiB guaranteed)'
    ]);
    expect(attr(tags(html, 'li', 'jp-vgpu-SliceRow')[0], 'title')).toContain(
      'limit 8.0 GiB: within its request.'
    );
  });

  it('says it is near its limit, not its slice, when the server says near', () => {
    const html = row(elasticSlice({ memory_used: 7.8 * GiB, state: 'near' }));
    expect(html).toContain('Near its limit');
  });
});

describe("a fixed slice's row", () => {
  it('reads used of reserved, as before limits existed', () => {
    const html = row(makeSlice({ memory_used: 1.2 * GiB }));
    expect(texts(html, 'jp-vgpu-SliceRow-memory')).toEqual(['1.2 / 4.0 GiB']);
    expect(attr(tags(html, 'li', 'jp-vgpu-SliceRow')[0], 'title')).not.toMatch(
      /guaranteed|limit \d/
    );
  });
});

describe("the status bar item of an elastic slice's kernel", () => {
  const slice = elasticSlice({ id: 'abc123', memory_used: 6.1 * GiB });

  it('says the use of what it may grow to, never as if the slice were twice its size', () => {
    expect(statusText(slice)).toBe('GPU 6.1 GiB of up to 8.0 GiB');
    expect(statusText(elasticSlice({ memory_used: null }))).toBe(
      'GPU – of up to 8.0 GiB'
    );
  });

  it('says request, limit and the burst in its tooltip', () => {
    const lines = statusTitle(slice, null, false).split('\n');
    expect(lines[0]).toBe(
      'GPU 6.1 GiB of up to 8.0 GiB (4.0 GiB guaranteed): 1/4 GPU, up to 1/2, slice abc123 (cooperative)'
    );
    expect(lines[1]).toBe(
      'Request 4.0 GiB (guaranteed), limit 8.0 GiB: bursting 2.1 GiB above its request.'
    );
  });

  it('says it is within its request when it does not burst', () => {
    const title = statusTitle(
      elasticSlice({ memory_used: 2 * GiB }),
      null,
      false
    );
    expect(title.split('\n')[1]).toBe(
      'Request 4.0 GiB (guaranteed), limit 8.0 GiB: within its request.'
    );
  });

  it("reads a fixed slice's use as before", () => {
    const fixed = makeSlice({ id: 'abc123', memory_used: 1.5 * GiB });
    expect(statusText(fixed)).toBe('GPU 1.5 / 4.0 GiB');
    expect(statusTitle(fixed, null, false).split('\n')[0]).toBe(
      'GPU 1.5 / 4.0 GiB used of reserved: 1/4 GPU, slice abc123 (cooperative)'
    );
  });
});
