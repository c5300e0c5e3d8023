/**
 * The GPU dashboard as drawn from a history: a section per GPU with its charts and its slices,
 * the ranges and the zoom, the banners.
 */
import * as React from 'react';

import { VGPUApiError } from '../store/api';
import {
  DashboardView,
  IDashboardViewProps,
  RANGES
} from '../dashboard/dashboard';
import { HistoryStore } from '../store/historyapi';
import {
  elasticSlice,
  fullReply,
  gpu,
  reply,
  storeOf,
  T0
} from './historyfixtures';
import { attr, render, tags, texts } from './render';

// JupyterLab's widget and icon packages are ES modules that need a DOM: the view needs neither.
jest.mock('@jupyterlab/ui-components', () => ({
  ReactWidget: class {},
  refreshIcon: { react: () => null }
}));
jest.mock('@jupyterlab/apputils', () => ({ MainAreaWidget: class {} }));
jest.mock('../icons', () => ({ dashboardIcon: {}, gpuIcon: {} }));

function view(
  store: HistoryStore,
  props: Partial<IDashboardViewProps> = {}
): string {
  return render(
    <DashboardView
      store={store}
      error={null}
      loading={false}
      span={900}
      zoom={null}
      onSpan={() => undefined}
      onZoom={() => undefined}
      onResetZoom={() => undefined}
      onRefresh={() => undefined}
      {...props}
    />
  );
}

/** The `data-chart` of each chart in a GPU's section, in order. */
function chartsOf(html: string, index: number): string[] {
  const start = html.indexOf(`data-gpu-index="${index}"`);
  const next = html.indexOf('data-gpu-index=', start + 1);
  const section = html.slice(start, next < 0 ? undefined : next);
  return tags(section, 'figure', 'jp-vgpu-Dashboard-chart').map(
    tag => attr(tag, 'data-chart') ?? ''
  );
}

describe('DashboardView', () => {
  it('draws a section per GPU with its charts and its slices', () => {
    const html = view(storeOf(fullReply()));
    expect(tags(html, 'div', 'jp-vgpu-Dashboard')).toHaveLength(1);
    expect(chartsOf(html, 0)).toEqual([
      'memory',
      'util',
      'power',
      'temp',
      'pcie',
      'slice'
    ]);
    expect(chartsOf(html, 1)).toEqual(['memory', 'util', 'slice']);
    expect(texts(html, 'jp-vgpu-Dashboard-sliceName')).toEqual([
      'train.ipynb',
      'python train.py'
    ]);
    expect(
      tags(html, 'figure', 'jp-vgpu-mod-slice').map(t =>
        attr(t, 'data-slice-id')
      )
    ).toEqual(['train', 'cmd']);
    expect(html).toContain('Python 3 (1/4 GPU) · 1/4 GPU');
    // Every chart is a TimeSeries with its readout.
    expect(tags(html, 'div', 'jp-vgpu-TimeSeries')).toHaveLength(9);
    expect(tags(html, 'div', 'jp-vgpu-TimeSeries-readout')).toHaveLength(9);
    expect(tags(html, 'line', 'jp-vgpu-Series-limit')).toHaveLength(1);
  });

  it('shows the latest values in each legend', () => {
    const html = view(storeOf(fullReply()));
    const keys = texts(html, 'jp-vgpu-Dashboard-key');
    expect(keys).toContain('used 2.0 GiB');
    expect(keys).toContain('power 170 W');
    expect(keys).toContain('limit 400 W');
    expect(keys).toContain('temperature 50 °C');
    expect(keys).toContain('PCIe RX 40 MiB/s');
  });

  it('says the GPUs are simulated', () => {
    const banner = texts(
      view(storeOf(fullReply())),
      'jp-vgpu-Dashboard-simulated'
    )[0];
    expect(banner).toContain(
      'Simulated GPUs (JUPYTER_VGPU_SIMULATE): not real hardware'
    );
    // memory and utilisation come from the kernels; only the rest is made up
    expect(banner).toContain(
      "Memory is what the kernels' frameworks hold in the host's memory"
    );
    expect(
      tags(
        view(storeOf(fullReply({ simulated: false }))),
        'div',
        'jp-vgpu-Dashboard-simulated'
      )
    ).toHaveLength(0);
  });

  it('offers the ranges and shows the chosen one', () => {
    const html = view(storeOf(fullReply()), { span: 300 });
    const buttons = tags(html, 'button', 'jp-vgpu-Dashboard-range');
    expect(texts(html, 'jp-vgpu-Dashboard-range')).toEqual(
      RANGES.map(r => r.label)
    );
    expect(buttons.map(b => attr(b, 'aria-pressed'))).toEqual([
      'true',
      'false',
      'false'
    ]);
    const [svg] = tags(html, 'svg', 'jp-vgpu-TimeSeries-svg');
    expect(attr(svg, 'data-start')).toBe(String(T0 + 20 - 300));
    expect(attr(svg, 'data-end')).toBe(String(T0 + 20));
    const [reset] = tags(html, 'button', 'jp-vgpu-Dashboard-resetZoom');
    expect(reset).toContain('disabled');
  });

  it('draws the zoomed window, and can reset it', () => {
    const html = view(storeOf(fullReply()), { zoom: [T0 + 5, T0 + 15] });
    const [svg] = tags(html, 'svg', 'jp-vgpu-TimeSeries-svg');
    expect(attr(svg, 'data-start')).toBe(String(T0 + 5));
    expect(attr(svg, 'data-points')).toBe('1');
    const [reset] = tags(html, 'button', 'jp-vgpu-Dashboard-resetZoom');
    expect(reset).not.toContain('disabled');
    expect(
      tags(html, 'button', 'jp-vgpu-Dashboard-range').map(b =>
        attr(b, 'aria-pressed')
      )
    ).toEqual(['false', 'false', 'false']);
  });

  it('says when there is no GPU', () => {
    const html = view(
      storeOf(
        reply(T0, [], [], {
          available: false,
          simulated: false,
          message: 'NVML is not available.'
        })
      )
    );
    expect(texts(html, 'jp-vgpu-Dashboard-noticeTitle')).toEqual([
      'No GPU on this server.'
    ]);
    expect(html).toContain('NVML is not available.');
    expect(tags(html, 'figure', 'jp-vgpu-Dashboard-chart')).toHaveLength(0);
  });

  it('says it is reading before the first reply', () => {
    const html = view(new HistoryStore(), { loading: true });
    expect(texts(html, 'jp-vgpu-Dashboard-noticeTitle')).toEqual([
      "Reading the GPUs' history…"
    ]);
  });

  it('keeps the last charts under an error', () => {
    const html = view(storeOf(fullReply()), {
      error: new VGPUApiError('The Jupyter server could not be reached.', 0)
    });
    expect(tags(html, 'div', 'jp-vgpu-mod-error')).toHaveLength(1);
    expect(html).toContain('The Jupyter server could not be reached.');
    expect(html).toContain('The charts show the last history read.');
    expect(chartsOf(html, 1)).toEqual(['memory', 'util', 'slice']);
  });

  it('says when a GPU has no slice', () => {
    const r = fullReply();
    r.slices = [];
    const html = view(storeOf(r));
    expect(texts(html, 'jp-vgpu-Dashboard-noSlices')).toHaveLength(2);
  });
});

describe("an elastic slice's chart", () => {
  const html = view(
    storeOf(
      reply(
        T0 + 20,
        [gpu('GPU-0', 0, [T0, T0 + 10, T0 + 20])],
        [elasticSlice('burst', [T0, T0 + 10, T0 + 20])]
      )
    )
  );
  const card = html.slice(html.indexOf('data-slice-id="burst"'));

  it('says its request, its limit and its burst in its legend', () => {
    expect(texts(card, 'jp-vgpu-Dashboard-key')).toEqual([
      'used 10.0 GiB',
      'burst 4.0 GiB',
      'utilisation 80%',
      'request 4.0 GiB',
      'limit 8.0 GiB'
    ]);
    expect(texts(card, 'jp-vgpu-Dashboard-chartNote')[0]).toContain(
      '1/4 GPU, up to 1/2'
    );
  });

  it('draws the request and the limit as lines, and the use above the request hatched', () => {
    expect(tags(card, 'line', 'jp-vgpu-TimeSeries-reference')).toHaveLength(2);
    expect(tags(card, 'line', 'jp-vgpu-Series-burstLimit')).toHaveLength(1);
    expect(
      tags(card, 'polygon', 'jp-vgpu-TimeSeries-areaAbove').length
    ).toBeGreaterThan(0);
    expect(tags(card, 'pattern', 'jp-vgpu-Series-burst')).toHaveLength(1);
  });
});
