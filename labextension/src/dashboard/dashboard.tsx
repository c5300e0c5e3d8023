/**
 * The GPU dashboard: a main-area panel of large time-series charts per GPU (memory, utilisation,
 * power, temperature, PCIe throughput: those NVML gives) and per live slice (memory against its
 * reservation, utilisation), over the last 5 minutes to an hour, with hover readouts, a range
 * selector and drag-to-zoom. Its data comes from a DashboardModel; above the charts, where the
 * server reads a site's Prometheus, the cluster (a ClusterModel's, cluster.tsx).
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { ReactWidget, refreshIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { preferredColour } from '../store/colours';
import { gpuCharts, sliceChart } from './dashboardcharts';
import { DashboardModel } from './dashboardmodel';
import { formatBytes, gatewayText } from '../format/format';
import { HistoryStore, ISliceHistory } from '../store/historyapi';
import { dashboardIcon } from '../icons';
import { GPUModel } from '../store/model';
import { useChanged } from '../charts/legend';
import { clockTime } from '../charts/scales';
import { SliceTimeline } from './timeline';
import { ChartCard } from './chartcard';
import { ClusterSection } from './cluster';
import { ClusterModel } from './clustermodel';
import { Notice } from './notice';

/** The id of the dashboard's main-area widget. */
export const DASHBOARD_ID = 'jp-vgpu-dashboard';

/** The ranges the selector offers. */
export const RANGES: { label: string; seconds: number }[] = [
  { label: '5 min', seconds: 300 },
  { label: '15 min', seconds: 900 },
  { label: '1 h', seconds: 3600 }
];

/** The range shown at first. */
export const DEFAULT_RANGE = 900;

/** A zoomed range spans at least this many points. */
const MIN_ZOOM_STEPS = 3;

/** Successive points more than this many steps apart are not joined (the server was down). */
const GAP_STEPS = 3.5;

// ---------------------------------------------------------------- view

export interface IDashboardViewProps {
  store: HistoryStore;
  error: { message: string } | null;
  loading: boolean;
  /** The range shown (seconds up to the latest sample) when not zoomed. */
  span: number;
  /** The zoomed window, or null. */
  zoom: [number, number] | null;
  onSpan: (seconds: number) => void;
  onZoom: (start: number, end: number) => void;
  onResetZoom: () => void;
  onRefresh: () => void;
  /** A slice's colour (the sidebar's); by default the one its id asks for. */
  colour?: (sliceId: string) => number;
  /** The cluster section, shown above this server's GPUs (nothing without a cluster view). */
  cluster?: React.ReactNode;
}

/** "GPUs 0, 1": where a slice is. */
function gpuList(slice: ISliceHistory): string {
  const indices = slice.gpu_indices ?? [];
  return indices.length === 1
    ? `GPU ${indices[0]}`
    : `GPUs ${indices.join(', ')}`;
}

function SliceCard(props: {
  slice: ISliceHistory;
  start: number;
  end: number;
  maxGap: number;
  onZoom: (start: number, end: number) => void;
}): JSX.Element {
  const { slice } = props;
  const spec = sliceChart(slice);
  const details = [
    slice.kernel_display_name,
    slice.request_text,
    (slice.gpu_indices ?? []).length > 1 ? `on ${gpuList(slice)}` : null,
    slice.yours ? null : "another user's"
  ].filter(Boolean);
  const full =
    slice.holder_kind === 'command'
      ? Array.isArray(slice.command)
        ? slice.command.join(' ')
        : (slice.command ?? '')
      : (slice.path ?? slice.kernel_id ?? '');
  return (
    <ChartCard
      spec={spec}
      start={props.start}
      end={props.end}
      maxGap={props.maxGap}
      onZoom={props.onZoom}
      className="jp-vgpu-mod-slice"
      attributes={{ 'data-slice-id': slice.id }}
      heading={
        <span className="jp-vgpu-Dashboard-chartTitle">
          <span
            className="jp-vgpu-Dashboard-sliceName"
            title={`${full}\nslice ${slice.id}`}
          >
            {spec.title}
          </span>
          <span className="jp-vgpu-Dashboard-chartNote">
            {' '}
            {details.join(' · ')}
          </span>
        </span>
      }
    />
  );
}

/** The dashboard as it reads from a history: the toolbar, notices, a section per GPU. */
export function DashboardView(props: IDashboardViewProps): JSX.Element {
  const { store, error, loading, span, zoom } = props;
  const latest = store.latest;
  const step = store.step;
  const end = zoom
    ? zoom[1]
    : (latest?.taken_at ?? Math.floor(Date.now() / 1000));
  const start = zoom ? zoom[0] : end - span;
  const onZoom = (a: number, b: number) => {
    const least = MIN_ZOOM_STEPS * step;
    if (b - a < least) {
      const middle = (a + b) / 2;
      [a, b] = [middle - least / 2, middle + least / 2];
    }
    props.onZoom(a, b);
  };
  const maxGap = GAP_STEPS * step;
  const colour = props.colour ?? preferredColour;
  const gpus = store.gpus;
  const slices = store.slices;
  const placed = new Set<string>();

  let body: React.ReactNode;
  if (!latest) {
    body = error ? null : (
      <Notice
        kind="loading"
        title={loading ? "Reading the GPUs' history…" : 'No history yet.'}
      />
    );
  } else if (!latest.available || gpus.length === 0) {
    body = (
      <Notice kind="empty" title="No GPU on this server.">
        {latest.message && (
          <p className="jp-vgpu-Dashboard-noticeDetail">{latest.message}</p>
        )}
        <p className="jp-vgpu-Dashboard-noticeDetail">
          Kernels run on the CPU. To try jupyter-vgpu anyway, start the server
          with JUPYTER_VGPU_SIMULATE=2x16GiB.
        </p>
      </Notice>
    );
  } else {
    body = gpus.map(gpu => {
      const on = store.slicesOn(gpu);
      on.forEach(s => placed.add(s.id));
      return (
        <section
          key={gpu.uuid}
          className="jp-vgpu-Dashboard-gpu"
          data-gpu-index={gpu.index}
          data-gpu-uuid={gpu.uuid}
          aria-label={`GPU ${gpu.index}`}
        >
          <h2 className="jp-vgpu-Dashboard-gpuTitle">
            GPU {gpu.index}
            <span className="jp-vgpu-Dashboard-gpuName" title={gpu.uuid}>
              {gpu.name}
            </span>
            <span className="jp-vgpu-Dashboard-gpuNote">
              {formatBytes(gpu.memory_total)}
              {' · '}
              {on.length === 1 ? '1 slice' : `${on.length} slices`}
            </span>
          </h2>
          <div className="jp-vgpu-Dashboard-grid">
            {gpuCharts(gpu).map(spec => (
              <ChartCard
                key={spec.kind}
                spec={spec}
                start={start}
                end={end}
                maxGap={maxGap}
                onZoom={onZoom}
              />
            ))}
          </div>
          <SliceTimeline
            gpuIndex={gpu.index}
            live={on}
            ended={store.endedOn(gpu)}
            start={start}
            end={end}
            colour={colour}
          />
          {on.length > 0 ? (
            <>
              <h3 className="jp-vgpu-Dashboard-slicesTitle">
                Slices on GPU {gpu.index}
              </h3>
              <div className="jp-vgpu-Dashboard-grid">
                {on.map(slice => (
                  <SliceCard
                    key={slice.id}
                    slice={slice}
                    start={start}
                    end={end}
                    maxGap={maxGap}
                    onZoom={onZoom}
                  />
                ))}
              </div>
            </>
          ) : (
            <p className="jp-vgpu-Dashboard-noSlices">
              No slice on this GPU now.
            </p>
          )}
        </section>
      );
    });
  }
  const unplaced = latest?.available
    ? slices.filter(s => !placed.has(s.id))
    : [];

  return (
    <div className="jp-vgpu-Dashboard">
      <div className="jp-vgpu-Dashboard-toolbar">
        <h1 className="jp-vgpu-Dashboard-title">GPU dashboard</h1>
        {latest?.gateway && (
          <span className="jp-vgpu-Dashboard-node">
            {gatewayText(latest.gateway)}
          </span>
        )}
        <div
          className="jp-vgpu-Dashboard-ranges"
          role="group"
          aria-label="Time range"
        >
          {RANGES.map(r => {
            const active = !zoom && span === r.seconds;
            return (
              <button
                key={r.seconds}
                className={`jp-vgpu-Dashboard-range${active ? ' jp-mod-active' : ''}`}
                aria-pressed={active}
                data-seconds={r.seconds}
                title={`The last ${r.label}`}
                onClick={() => props.onSpan(r.seconds)}
              >
                {r.label}
              </button>
            );
          })}
        </div>
        <button
          className="jp-vgpu-Dashboard-resetZoom"
          disabled={!zoom}
          title={
            zoom ? 'Back to the chosen range' : 'Drag across a chart to zoom'
          }
          onClick={props.onResetZoom}
        >
          Reset zoom
        </button>
        <span className="jp-vgpu-Dashboard-status">
          {zoom
            ? `${clockTime(zoom[0], true)} to ${clockTime(zoom[1], true)}`
            : latest
              ? `updated ${clockTime(latest.taken_at, true)}`
              : ''}
          {latest ? ` · a point every ${step} s` : ''}
          {' · drag across a chart to zoom'}
        </span>
        <button
          className="jp-Button jp-mod-minimal jp-vgpu-Dashboard-refresh"
          title="Refresh"
          aria-label="Refresh"
          onClick={props.onRefresh}
        >
          <refreshIcon.react tag="span" elementSize="normal" />
        </button>
      </div>
      {latest?.simulated && (
        <div className="jp-vgpu-Dashboard-simulated" role="note">
          Simulated GPUs (JUPYTER_VGPU_SIMULATE): not real hardware. Memory is
          what the kernels&apos; frameworks hold in the host&apos;s memory and
          utilisation their CPU load; power, temperature and PCIe are made up
          from them to show what the dashboard draws.
        </div>
      )}
      {error && (
        <Notice
          kind="error"
          role="alert"
          title="The GPU history could not be read."
        >
          <p className="jp-vgpu-Dashboard-noticeDetail">{error.message}</p>
          <p className="jp-vgpu-Dashboard-noticeDetail">
            {latest ? 'The charts show the last history read. ' : ''}
            Retrying less often until the server answers.{' '}
            <button className="jp-vgpu-mod-link" onClick={props.onRefresh}>
              Retry now
            </button>
          </p>
        </Notice>
      )}
      {props.cluster}
      {body}
      {unplaced.length > 0 && (
        <section className="jp-vgpu-Dashboard-gpu jp-vgpu-mod-other">
          <h2 className="jp-vgpu-Dashboard-gpuTitle">Other slices</h2>
          <div className="jp-vgpu-Dashboard-grid">
            {unplaced.map(slice => (
              <SliceCard
                key={slice.id}
                slice={slice}
                start={start}
                end={end}
                maxGap={maxGap}
                onZoom={onZoom}
              />
            ))}
          </div>
        </section>
      )}
    </div>
  );
}

/** The view bound to a model: it holds the range and the zoom. */
export function Dashboard(props: {
  model: DashboardModel;
  cluster?: ClusterModel;
}): JSX.Element {
  const { model, cluster } = props;
  const [span, setSpan] = React.useState(DEFAULT_RANGE);
  const [zoom, setZoom] = React.useState<[number, number] | null>(null);
  useChanged(model);
  return (
    <DashboardView
      store={model.store}
      error={model.error}
      loading={model.loading}
      span={span}
      zoom={zoom}
      onSpan={seconds => {
        setSpan(seconds);
        setZoom(null);
      }}
      onZoom={(a, b) => setZoom([a, b])}
      onResetZoom={() => setZoom(null)}
      onRefresh={() => {
        void model.refresh();
        void cluster?.refresh();
      }}
      colour={id => model.colour(id)}
      cluster={cluster ? <ClusterSection model={cluster} /> : null}
    />
  );
}

// ---------------------------------------------------------------- widget

/** A Lumino message (the type `@lumino/messaging` names, without depending on it here). */
type Message = Parameters<ReactWidget['processMessage']>[0];

/** The dashboard's content: reads the store's history while it shows. */
export class GPUDashboard extends ReactWidget {
  constructor(options: GPUDashboard.IOptions) {
    super();
    this.addClass('jp-vgpu-DashboardWidget');
    this.title.label = 'GPU dashboard';
    this.title.caption =
      'GPU memory, utilisation, power, temperature and PCIe throughput over time';
    this.title.icon = dashboardIcon;
    this.model = new DashboardModel({
      model: options.model,
      isVisible: () => this.isVisible
    });
    this.cluster = new ClusterModel({
      model: options.model,
      isVisible: () => this.isVisible
    });
  }

  readonly model: DashboardModel;

  /** The cluster section's: read while the dashboard shows, unless the server has no cluster view. */
  readonly cluster: ClusterModel;

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    this.cluster.dispose();
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.model.start();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this.model.refreshIfStale();
    this.cluster.refreshIfStale();
  }

  protected render(): JSX.Element {
    return <Dashboard model={this.model} cluster={this.cluster} />;
  }
}

export namespace GPUDashboard {
  export interface IOptions {
    /** The store the sidebar and the status bar read too. */
    model: GPUModel;
  }
}

/** The dashboard in a main-area widget (id `jp-vgpu-dashboard`), ready to add to the shell. */
export function createDashboard(model: GPUModel): MainAreaWidget<GPUDashboard> {
  const content = new GPUDashboard({ model });
  const widget = new MainAreaWidget({ content });
  widget.id = DASHBOARD_ID;
  widget.addClass('jp-vgpu-DashboardPanel');
  widget.toolbar.hide(); // the dashboard has its own controls
  return widget;
}
