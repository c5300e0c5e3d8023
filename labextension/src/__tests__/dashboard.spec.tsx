/**
 * The GPU dashboard: what it draws from a reply (a chart for each series NVML gives, a chart
 * per live slice under its GPU, the banners) and how its model polls.
 */
import * as React from 'react';

import { VGPUApiError } from '../api';
import {
  DashboardModel,
  DashboardView,
  gpuCharts,
  IDashboardViewProps,
  RANGES,
  sliceChart
} from '../dashboard';
import { HistoryStore, IHistoryReply } from '../historyapi';
import { GiB, gpu, gpuPoint, reply, slice } from './historyfixtures';
import { attr, render, tags, texts } from './render';

// JupyterLab's widget and icon packages are ES modules that need a DOM: the view needs neither.
jest.mock('@jupyterlab/ui-components', () => ({
  ReactWidget: class {},
  refreshIcon: { react: () => null }
}));
jest.mock('@jupyterlab/apputils', () => ({ MainAreaWidget: class {} }));
jest.mock('../icons', () => ({ dashboardIcon: {}, gpuIcon: {} }));

const T0 = 1700000000;

/** GPU 0 with every series NVML can give, GPU 1 with memory and utilisation only. */
function fullReply(fields: Partial<IHistoryReply> = {}): IHistoryReply {
  const rich = gpu('GPU-0', 0, []);
  rich.name = 'NVIDIA A100-SXM4-80GB';
  rich.memory_total = 80 * GiB;
  rich.power_limit = 400;
  rich.points = [0, 10, 20].map(dt =>
    gpuPoint(T0 + dt, {
      power: 150 + dt,
      temp: 50,
      pcie_tx: 1024 ** 2 * dt,
      pcie_rx: 2 * 1024 ** 2 * dt
    })
  );
  const plain = gpu('GPU-1', 1, [T0, T0 + 10, T0 + 20]);
  const notebook = slice('train', [T0, T0 + 10, T0 + 20]);
  const command = {
    ...slice('cmd', [T0 + 10, T0 + 20]),
    holder_kind: 'command' as const,
    kernel_id: null,
    path: null,
    kernel_display_name: null,
    command: ['/opt/conda/bin/python', 'train.py'],
    request_text: '8 GiB',
    gpus: ['GPU-1'],
    gpu_indices: [1],
    memory_reserved_total: 8 * GiB
  };
  return reply(T0 + 20, [rich, plain], [notebook, command], fields);
}

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

function storeOf(r: IHistoryReply): HistoryStore {
  const store = new HistoryStore();
  store.apply(r);
  return store;
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

describe('the charts of a GPU', () => {
  it('are those of the series that have a value', () => {
    const [rich, plain] = storeOf(fullReply()).gpus;
    expect(gpuCharts(rich).map(c => c.kind)).toEqual([
      'memory',
      'util',
      'power',
      'temp',
      'pcie'
    ]);
    expect(gpuCharts(plain).map(c => c.kind)).toEqual(['memory', 'util']);
  });

  it('draw memory up to the total, with what the slices reserve', () => {
    const [rich] = storeOf(fullReply()).gpus;
    const [memory] = gpuCharts(rich);
    expect(memory.left.max).toBe(80 * GiB);
    expect(memory.series.map(s => s.id)).toEqual(['used', 'reserved']);
    const power = gpuCharts(rich).find(c => c.kind === 'power')!;
    expect(power.references?.[0].value).toBe(400);
    const pcie = gpuCharts(rich).find(c => c.kind === 'pcie')!;
    expect(pcie.series.map(s => s.label)).toEqual(['PCIe TX', 'PCIe RX']);
  });

  it('leave out a PCIe direction NVML does not give', () => {
    const r = fullReply();
    r.gpus[0].points = r.gpus[0].points.map(p => ({ ...p, pcie_rx: null }));
    const pcie = gpuCharts(storeOf(r).gpus[0]).find(c => c.kind === 'pcie')!;
    expect(pcie.series.map(s => s.id)).toEqual(['tx']);
  });
});

describe('a slice', () => {
  it('is titled by its notebook or its command, against its reservation', () => {
    const [notebook, command] = storeOf(fullReply()).slices;
    const chart = sliceChart(notebook);
    expect(chart.title).toBe('train.ipynb');
    expect(chart.references?.[0].value).toBe(4 * GiB);
    expect(chart.series.map(s => s.id)).toEqual(['used', 'util']);
    expect(sliceChart(command).title).toBe('python train.py');
  });
});

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
    expect(
      texts(view(storeOf(fullReply())), 'jp-vgpu-Dashboard-simulated')[0]
    ).toContain('Simulated GPUs (JUPYTER_VGPU_SIMULATE): not real hardware');
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

describe('DashboardModel', () => {
  let replies: (IHistoryReply | Error)[];
  let since: (number | null | undefined)[];
  let model: DashboardModel;

  beforeEach(() => {
    jest.useFakeTimers({ doNotFake: ['Date', 'nextTick', 'queueMicrotask'] });
    replies = [];
    since = [];
    model = new DashboardModel({
      client: {
        history: (s?: number | null) => {
          since.push(s);
          const next = replies.shift();
          return next instanceof Error || next === undefined
            ? Promise.reject(next ?? new Error('no reply left'))
            : Promise.resolve(next);
        }
      }
    });
  });

  afterEach(() => {
    model.dispose();
    jest.clearAllTimers();
    jest.useRealTimers();
  });

  async function refreshed(): Promise<void> {
    const changed = new Promise<void>(resolve => {
      const done = () => {
        model.changed.disconnect(done);
        resolve();
      };
      model.changed.connect(done);
    });
    await model.refresh();
    await jest.advanceTimersByTimeAsync(0);
    await changed;
  }

  it('appends what follows each reply, and keeps it under an error', async () => {
    replies.push(
      reply(T0 + 10, [gpu('GPU-0', 0, [T0, T0 + 10])]),
      reply(T0 + 20, [gpu('GPU-0', 0, [T0 + 20])]),
      new VGPUApiError('Down.', 502)
    );
    expect(model.loading).toBe(true);
    await refreshed();
    expect(model.loading).toBe(false);
    await refreshed();
    expect(since).toEqual([null, T0 + 10]);
    expect(model.store.gpus[0].points.map(p => p.t)).toEqual([
      T0,
      T0 + 10,
      T0 + 20
    ]);
    await refreshed();
    expect(model.error?.message).toBe('Down.');
    expect(model.store.gpus[0].points).toHaveLength(3);
  });
});
