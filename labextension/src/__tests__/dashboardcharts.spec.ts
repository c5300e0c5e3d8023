/**
 * What the GPU dashboard charts: a chart for each series NVML gives, a chart per live slice.
 */
import { gpuCharts, sliceChart } from '../dashboard/dashboardcharts';
import { fullReply, GiB, storeOf } from './historyfixtures';

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
