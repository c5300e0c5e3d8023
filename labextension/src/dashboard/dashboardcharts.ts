/**
 * What the GPU dashboard charts: for each GPU, a chart per series NVML gives (memory always;
 * utilisation, power, temperature, PCIe where known); for each live slice, its memory against
 * its reservation (an elastic slice's: its request and its limit) and its utilisation; for a
 * node of the cluster, its memory (total, booked, used, and yours) as Prometheus kept it.
 */
import { ISlice } from '../store/api';
import { INodeHistoryPoint } from '../store/clustertypes';
import { formatBytes, formatPercent, holderLabel } from '../format/format';
import {
  IGPUHistory,
  IGPUHistoryPoint,
  ISliceHistory,
  ISliceHistoryPoint
} from '../store/historyapi';
import {
  AXES,
  formatCelsius,
  formatRate,
  formatWatts,
  IAxis,
  IReferenceLine,
  ISeries,
  ITimePoint
} from '../charts/scales';

/** One chart of the dashboard. */
export interface IChartSpec<P extends ITimePoint> {
  /** What it shows, as `data-chart` ("memory", "util", "power", "temp", "pcie", "slice"). */
  kind: string;
  title: string;
  /** Beside the title: "of 80 GiB", "limit 300 W". */
  note?: string;
  subject: string;
  points: P[];
  series: ISeries<P>[];
  references?: IReferenceLine[];
  left: IAxis;
  right?: IAxis;
}

/** Whether any point has a value for `key`. */
function has<P>(points: P[], key: keyof P): boolean {
  return points.some(p => {
    const v = p[key];
    return typeof v === 'number' && isFinite(v);
  });
}

/** The charts of one GPU: memory always, the others where NVML gives the series. */
/** The memory in use, drawn first and filled on every memory chart (a GPU's and a slice's). */
function usedSeries<
  P extends ITimePoint & { used: number | null }
>(): ISeries<P> {
  return {
    id: 'used',
    label: 'used',
    value: p => p.used,
    format: formatBytes,
    className: 'jp-vgpu-Series-memory',
    areaClassName: 'jp-vgpu-Series-memory'
  };
}

export function gpuCharts(gpu: IGPUHistory): IChartSpec<IGPUHistoryPoint>[] {
  const points = gpu.points ?? [];
  const name = `GPU ${gpu.index}`;
  const charts: IChartSpec<IGPUHistoryPoint>[] = [
    {
      kind: 'memory',
      title: 'Memory',
      note: `of ${formatBytes(gpu.memory_total)}`,
      subject: `${name} memory`,
      points,
      series: [
        usedSeries<IGPUHistoryPoint>(),
        {
          id: 'reserved',
          label: 'reserved by slices',
          value: p => p.reserved,
          format: formatBytes,
          className: 'jp-vgpu-Series-reserved'
        }
      ],
      left: AXES.bytes(gpu.memory_total)
    }
  ];
  if (has(points, 'util')) {
    charts.push({
      kind: 'util',
      title: 'Utilisation',
      subject: `${name} utilisation`,
      points,
      series: [
        {
          id: 'util',
          label: 'utilisation',
          value: p => p.util,
          format: formatPercent,
          className: 'jp-vgpu-Series-util',
          areaClassName: 'jp-vgpu-Series-util'
        }
      ],
      left: AXES.percent()
    });
  }
  if (has(points, 'power')) {
    charts.push({
      kind: 'power',
      title: 'Power',
      note:
        typeof gpu.power_limit === 'number'
          ? `limit ${formatWatts(gpu.power_limit)}`
          : undefined,
      subject: `${name} power`,
      points,
      series: [
        {
          id: 'power',
          label: 'power',
          value: p => p.power,
          format: formatWatts,
          className: 'jp-vgpu-Series-power'
        }
      ],
      references: [
        {
          id: 'limit',
          label: 'limit',
          value: gpu.power_limit,
          format: formatWatts,
          className: 'jp-vgpu-Series-limit'
        }
      ],
      left: AXES.watts()
    });
  }
  if (has(points, 'temp')) {
    charts.push({
      kind: 'temp',
      title: 'Temperature',
      subject: `${name} temperature`,
      points,
      series: [
        {
          id: 'temp',
          label: 'temperature',
          value: p => p.temp,
          format: formatCelsius,
          className: 'jp-vgpu-Series-temp'
        }
      ],
      left: AXES.celsius()
    });
  }
  const tx = has(points, 'pcie_tx');
  const rx = has(points, 'pcie_rx');
  if (tx || rx) {
    const series: ISeries<IGPUHistoryPoint>[] = [];
    if (tx) {
      series.push({
        id: 'tx',
        label: 'PCIe TX',
        value: p => p.pcie_tx,
        format: formatRate,
        className: 'jp-vgpu-Series-tx'
      });
    }
    if (rx) {
      series.push({
        id: 'rx',
        label: 'PCIe RX',
        value: p => p.pcie_rx,
        format: formatRate,
        className: 'jp-vgpu-Series-rx'
      });
    }
    charts.push({
      kind: 'pcie',
      title: 'PCIe throughput',
      subject: `${name} PCIe throughput`,
      points,
      series,
      left: AXES.rate()
    });
  }
  return charts;
}

/** What a user calls a slice's holder: the notebook's name, or the command. */
export function sliceTitle(slice: ISliceHistory): string {
  // holderLabel reads only the holder fields, which the history's slices carry too.
  return holderLabel(slice as unknown as ISlice);
}

/**
 * A slice's chart: memory used against its reservation, and utilisation. An elastic slice's
 * (one whose history carries `memory_limit_total`) has its request and its limit as lines, its
 * use above the request hatched, and its burst in the readout and the legend.
 */
export function sliceChart(
  slice: ISliceHistory
): IChartSpec<ISliceHistoryPoint> {
  const title = sliceTitle(slice);
  const request = slice.memory_reserved_total;
  const limit = slice.memory_limit_total;
  const elastic = typeof limit === 'number' && isFinite(limit);
  const used = usedSeries<ISliceHistoryPoint>();
  const series: ISeries<ISliceHistoryPoint>[] = [used];
  if (elastic) {
    used.areaAbove = { value: request, className: 'jp-vgpu-Series-burst' };
    series.push({
      id: 'burst',
      label: 'burst',
      // What the server calls the burst: above the request, within the limit.
      value: p =>
        typeof p.used === 'number'
          ? Math.max(0, Math.min(p.used, limit) - request)
          : null,
      format: formatBytes,
      className: 'jp-vgpu-Series-burst',
      readoutOnly: true
    });
  }
  const points = slice.points ?? [];
  if (has(points, 'util')) {
    series.push({
      id: 'util',
      label: 'utilisation',
      value: p => p.util,
      format: formatPercent,
      className: 'jp-vgpu-Series-util',
      axis: 'right'
    });
  }
  const references: IReferenceLine[] = elastic
    ? [
        {
          id: 'request',
          label: 'request',
          value: request,
          format: formatBytes,
          className: 'jp-vgpu-Series-reserved'
        },
        {
          id: 'limit',
          label: 'limit',
          value: limit,
          format: formatBytes,
          className: 'jp-vgpu-Series-limit jp-vgpu-Series-burstLimit'
        }
      ]
    : [
        {
          id: 'reserved',
          label: 'reserved',
          value: request,
          format: formatBytes,
          className: 'jp-vgpu-Series-reserved'
        }
      ];
  return {
    kind: 'slice',
    title,
    subject: `${title} memory and utilisation`,
    points,
    series,
    references,
    left: AXES.bytes(null),
    right: series.some(s => s.axis === 'right') ? AXES.percent() : undefined
  };
}

/**
 * A node's memory over time, summed over its GPUs (`GET /api/vgpu/cluster/nodes/<hostname>/history`):
 * used filled as on a GPU's chart, booked dashed as a GPU's reservations, its total as a line,
 * and what your slices book and use there in the accent colour.
 */
export function nodeHistoryChart(
  hostname: string,
  points: INodeHistoryPoint[]
): IChartSpec<INodeHistoryPoint> {
  return {
    kind: 'node',
    title: `${hostname} memory`,
    note: 'all its GPUs, as Prometheus kept it',
    subject: `${hostname} memory`,
    points,
    series: [
      usedSeries<INodeHistoryPoint>(),
      {
        id: 'booked',
        label: 'booked',
        value: p => p.booked,
        format: formatBytes,
        className: 'jp-vgpu-Series-reserved'
      },
      {
        id: 'total',
        label: 'total',
        value: p => p.total,
        format: formatBytes,
        className: 'jp-vgpu-Series-total'
      },
      {
        id: 'yours_used',
        label: 'yours used',
        value: p => p.yours_used,
        format: formatBytes,
        className: 'jp-vgpu-Series-yours'
      },
      {
        id: 'yours_booked',
        label: 'yours booked',
        value: p => p.yours_booked,
        format: formatBytes,
        className: 'jp-vgpu-Series-yours jp-vgpu-Series-yoursBooked'
      }
    ],
    left: AXES.bytes(null)
  };
}
