/**
 * What the GPU dashboard charts: a chart for each series NVML gives, a chart per live slice.
 */
import { gpuCharts, sliceChart } from '../dashboard/dashboardcharts';
import { elasticSlice, fullReply, GiB, storeOf, T0 } from './historyfixtures';

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

describe('an elastic slice', () => {
  const chart = sliceChart(elasticSlice('burst', [T0, T0 + 10, T0 + 20]));

  it('is drawn against its request and its limit, as two lines', () => {
    expect(
      chart.references?.map(r => [r.id, r.label, r.value, r.className])
    ).toEqual([
      ['request', 'request', 4 * GiB, 'jp-vgpu-Series-reserved'],
      [
        'limit',
        'limit',
        8 * GiB,
        'jp-vgpu-Series-limit jp-vgpu-Series-burstLimit'
      ]
    ]);
  });

  it('has its use above the request hatched, and its burst read, not drawn', () => {
    const [used, burst, util] = chart.series;
    expect(chart.series.map(s => s.id)).toEqual(['used', 'burst', 'util']);
    expect(used.areaAbove).toEqual({
      value: 4 * GiB,
      className: 'jp-vgpu-Series-burst'
    });
    expect(burst.readoutOnly).toBe(true);
    expect(burst.className).toBe('jp-vgpu-Series-burst');
    // Within the request none; above it, up to the limit (use beyond it is over-use).
    expect(chart.points.map(p => burst.value(p))).toEqual([
      0,
      2 * GiB,
      4 * GiB
    ]);
    expect(util.axis).toBe('right');
    expect(chart.right).toBeDefined();
  });

  it("leaves a fixed slice's chart as it was: its reservation, nothing hatched", () => {
    const [notebook] = storeOf(fullReply()).slices;
    const fixed = sliceChart(notebook);
    expect(fixed.references?.map(r => r.id)).toEqual(['reserved']);
    expect(fixed.series.map(s => s.id)).toEqual(['used', 'util']);
    expect(fixed.series[0].areaAbove).toBeUndefined();
    const older = sliceChart({ ...notebook, memory_limit_total: undefined });
    expect(older.references?.map(r => r.id)).toEqual(['reserved']);
  });
});
