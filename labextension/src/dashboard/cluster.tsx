/**
 * The GPU dashboard's cluster section (a site's Prometheus, through `GET /api/vgpu/cluster`):
 * where there is room now (a card per node, the most room on one GPU first, stale nodes last and
 * marked, with their figures kept), where your kernels run (your slices by node), and a picked
 * node's memory over the last hour. Hidden entirely on a server without a cluster view.
 */
import * as React from 'react';

import { clockTime } from '../charts/scales';
import {
  clusterHolderLabel,
  clusterTierText,
  formatBytes,
  formatUsage,
  gpuCountText,
  gpuFiguresText,
  gpuModelText,
  nodeTotals,
  roomOnOneGPU,
  seenText,
  share,
  sliceGPUsText,
  slicesByNode,
  sliceSum,
  sortNodes,
  waitingText,
  yoursText
} from '../format/format';
import { VGPUApiError } from '../store/api';
import {
  ClusterState,
  INodeHistoryState,
  NODE_HISTORY_SECONDS,
  nodeHistoryPoints
} from '../store/cluster';
import type {
  IClusterGPU,
  IClusterNode,
  IClusterReply,
  IClusterSlice
} from '../store/clustertypes';
import { ChartCard } from './chartcard';
import { ClusterModel } from './clustermodel';
import { nodeHistoryChart } from './dashboardcharts';
import { Notice } from './notice';

/** Successive points more than this many steps apart are not joined (as the dashboard's). */
const GAP_STEPS = 3.5;

/** Said of a stale node the server gave no sentence for. */
const STALE_FALLBACK =
  'Its exporter has not reported lately; these are the last figures it reported.';

function percent(fraction: number): string {
  return `${(fraction * 100).toFixed(3)}%`;
}

/** One GPU's part of a node's bar: booked pale, used solid, free empty. */
function GPUCell(props: { gpu: IClusterGPU; weight: number }): JSX.Element {
  const { gpu } = props;
  const known = typeof gpu.total === 'number' && gpu.total > 0;
  return (
    <div
      className={`jp-vgpu-ClusterBar-gpu${known ? '' : ' jp-vgpu-mod-unknown'}`}
      style={{ flexGrow: props.weight }}
      title={gpuFiguresText(gpu)}
      data-gpu-index={gpu.index}
    >
      {known && (
        <>
          <div
            className="jp-vgpu-ClusterBar-booked"
            style={{ width: percent(share(gpu.booked, gpu.total)) }}
          />
          <div
            className="jp-vgpu-ClusterBar-used"
            style={{ width: percent(share(gpu.used, gpu.total)) }}
          />
        </>
      )}
    </div>
  );
}

/** A node's memory, GPU by GPU (each as wide as its memory). */
function NodeBar(props: { node: IClusterNode }): JSX.Element {
  const gpus = props.node.gpus ?? [];
  const totals = gpus.map(g =>
    typeof g.total === 'number' && g.total > 0 ? g.total : null
  );
  const known = totals.filter((t): t is number => t !== null);
  // A GPU of unknown size is drawn as wide as the average known one (or all alike).
  const average = known.length
    ? known.reduce((a, b) => a + b, 0) / known.length
    : 1;
  const label = gpus.length
    ? gpus.map(gpuFiguresText).join('; ')
    : 'No GPU figures read';
  return (
    <div className="jp-vgpu-ClusterBar" role="img" aria-label={label}>
      {gpus.map((gpu, i) => (
        <GPUCell
          key={gpu.uuid || i}
          gpu={gpu}
          weight={(totals[i] ?? average) / average}
        />
      ))}
    </div>
  );
}

/** A figure of a node's card: its name, its value ("–" when unknown). */
function Figure(props: {
  name: string;
  label: string;
  value: string;
  title?: string;
}): JSX.Element {
  return (
    <span
      className="jp-vgpu-ClusterNode-figure"
      data-figure={props.name}
      title={props.title}
    >
      {props.label}{' '}
      <span className="jp-vgpu-ClusterNode-value">{props.value}</span>
    </span>
  );
}

export interface INodeCardProps {
  node: IClusterNode;
  /** When the cluster was read (the server's clock): "seen 3 s ago" counts from it. */
  readAt: number;
  /** How many of your slices it holds. */
  yours: number;
  selected: boolean;
  onSelect: (hostname: string) => void;
}

/** One node: its name, GPUs, bar, figures and line; stale ones marked, with the server's sentence. */
export function NodeCard(props: INodeCardProps): JSX.Element {
  const { node, yours, selected } = props;
  const totals = nodeTotals(node);
  const classes = [
    'jp-vgpu-ClusterNode',
    node.stale ? 'jp-vgpu-mod-stale' : '',
    yours > 0 ? 'jp-vgpu-mod-yours' : '',
    selected ? 'jp-mod-selected' : ''
  ].filter(Boolean);
  const figuresAt =
    node.stale && typeof node.figures_at === 'number'
      ? `Figures as read at ${clockTime(node.figures_at, true)}`
      : undefined;
  return (
    <li
      className={classes.join(' ')}
      data-hostname={node.hostname}
      data-stale={String(node.stale)}
      data-yours={yours}
    >
      <div className="jp-vgpu-ClusterNode-head">
        <button
          className="jp-vgpu-ClusterNode-name jp-vgpu-mod-link"
          aria-pressed={selected}
          title={
            selected
              ? `Hide ${node.hostname}'s memory over time`
              : `Show ${node.hostname}'s memory over the last hour`
          }
          onClick={() => props.onSelect(node.hostname)}
        >
          {node.hostname}
        </button>
        <span className="jp-vgpu-ClusterNode-model" title={gpuCountText(node)}>
          {gpuModelText(node)}
        </span>
        {node.stale && (
          <span
            className="jp-vgpu-Chip jp-vgpu-mod-stale"
            title={node.problem ?? STALE_FALLBACK}
          >
            stale
          </span>
        )}
        {yours > 0 && (
          <span
            className="jp-vgpu-Chip jp-vgpu-mod-yours"
            title={`${node.hostname} holds ${yours === 1 ? 'one of your slices' : `${yours} of your slices`} (below)`}
          >
            {yoursText(yours)}
          </span>
        )}
        <span className="jp-vgpu-ClusterNode-seen" title={figuresAt}>
          {seenText(node, props.readAt)}
        </span>
      </div>
      <NodeBar node={node} />
      <div className="jp-vgpu-ClusterNode-figures">
        <Figure
          name="booked"
          label="booked"
          value={formatUsage(totals.booked, totals.total)}
          title="What every user's slices book, of the node's GPU memory"
        />
        <Figure name="used" label="used" value={formatBytes(totals.used)} />
        <Figure
          name="free"
          label="free"
          value={formatBytes(totals.free)}
          title="What new slices could get on all its GPUs together"
        />
        <Figure
          name="room"
          label="room on one GPU"
          value={formatBytes(roomOnOneGPU(node))}
          title="The largest slice one GPU of the node could give now"
        />
        <Figure
          name="line"
          label="line"
          value={waitingText(node)}
          title="Every user's requests waiting for a slice on this node, and the memory they ask for"
        />
      </div>
      {node.stale && (
        <p className="jp-vgpu-ClusterNode-problem" role="note">
          {node.problem ?? STALE_FALLBACK}
        </p>
      )}
    </li>
  );
}

/** Your slices by node: node, GPU, holder, request, used, tier. */
export function YourSlices(props: {
  slices: IClusterSlice[];
  nodes: IClusterNode[];
}): JSX.Element {
  const groups = slicesByNode(props.slices);
  if (groups.length === 0) {
    return (
      <p className="jp-vgpu-Dashboard-noSlices jp-vgpu-ClusterSlices-none">
        You hold no slice on any node.
      </p>
    );
  }
  const stale = new Set(props.nodes.filter(n => n.stale).map(n => n.hostname));
  return (
    <table className="jp-vgpu-ClusterSlices">
      <thead>
        <tr>
          <th scope="col">Node</th>
          <th scope="col">GPU</th>
          <th scope="col">Holder</th>
          <th scope="col">Request</th>
          <th scope="col">Used</th>
          <th scope="col">Tier</th>
        </tr>
      </thead>
      {groups.map(([hostname, slices]) => (
        <tbody key={hostname} data-hostname={hostname}>
          {slices.map((slice, i) => (
            <tr key={slice.id} data-slice-id={slice.id}>
              {i === 0 && (
                <th
                  scope="rowgroup"
                  rowSpan={slices.length}
                  className="jp-vgpu-ClusterSlices-node"
                >
                  {hostname}
                  {stale.has(hostname) && (
                    <span
                      className="jp-vgpu-Chip jp-vgpu-mod-stale"
                      title="Its exporter has not reported lately: as last reported"
                    >
                      stale
                    </span>
                  )}
                </th>
              )}
              <td className="jp-vgpu-ClusterSlices-gpu">
                {sliceGPUsText(slice)}
              </td>
              <td
                className="jp-vgpu-ClusterSlices-holder"
                title={`${slice.holder}\nslice ${slice.id}`}
              >
                {clusterHolderLabel(slice)}
              </td>
              <td className="jp-vgpu-ClusterSlices-request">
                {formatBytes(sliceSum(slice, 'request'))}
              </td>
              <td className="jp-vgpu-ClusterSlices-used">
                {formatBytes(sliceSum(slice, 'used'))}
              </td>
              <td className="jp-vgpu-ClusterSlices-tier">
                {clusterTierText(slice.tier)}
              </td>
            </tr>
          ))}
        </tbody>
      ))}
    </table>
  );
}

/** The picked node's memory over the last hour, or why it does not show. */
export function NodeHistory(props: {
  hostname: string;
  history: INodeHistoryState | undefined;
  /** When the cluster was read (the server's clock): the chart ends there before a reply. */
  readAt: number;
  onClose: () => void;
}): JSX.Element {
  const { hostname, history } = props;
  const reply = history?.reply ?? null;
  const points = nodeHistoryPoints(reply);
  const step =
    typeof reply?.step === 'number' && reply.step > 0 ? reply.step : 15;
  const seconds =
    typeof reply?.seconds === 'number' && reply.seconds > 0
      ? reply.seconds
      : NODE_HISTORY_SECONDS;
  const end = points.length ? points[points.length - 1].t : props.readAt;
  let body: React.ReactNode;
  if (!reply) {
    body = history?.error ? (
      <Notice kind="error" title={history.error} />
    ) : (
      <Notice kind="loading" title={`Reading ${hostname}'s history…`} />
    );
  } else {
    body = (
      <>
        <ChartCard
          spec={nodeHistoryChart(hostname, points)}
          start={end - seconds}
          end={end}
          maxGap={GAP_STEPS * step}
          className="jp-vgpu-mod-node"
          attributes={{ 'data-hostname': hostname }}
        />
        {history?.error && (
          <p className="jp-vgpu-ClusterHistory-error" role="status">
            {history.error} The chart shows the last history read.
          </p>
        )}
      </>
    );
  }
  return (
    <div
      className="jp-vgpu-ClusterHistory"
      data-hostname={hostname}
      aria-label={`${hostname}'s memory over time`}
      role="region"
    >
      <h3 className="jp-vgpu-Dashboard-slicesTitle">
        {hostname} over the last hour
        <button
          className="jp-vgpu-mod-link jp-vgpu-ClusterHistory-close"
          onClick={props.onClose}
        >
          Hide
        </button>
      </h3>
      {body}
    </div>
  );
}

export interface IClusterViewProps {
  state: ClusterState;
  view: IClusterReply | null;
  error: VGPUApiError | null;
  /** The node whose history shows, or null. */
  selected: string | null;
  history?: INodeHistoryState;
  onSelect: (hostname: string | null) => void;
  onRetry: () => void;
}

/** The cluster section as it reads from the store; nothing on a server without a cluster view. */
export function ClusterView(props: IClusterViewProps): JSX.Element | null {
  const { state, view, error, selected } = props;
  if (state === 'absent') {
    return null;
  }
  let note: string | null = null;
  let body: React.ReactNode;
  if (state === 'unread') {
    body = <Notice kind="loading" title="Reading the cluster…" />;
  } else if (state === 'failed' || !view) {
    body = (
      <Notice kind="error" role="alert" title={error?.message ?? ''}>
        <p className="jp-vgpu-Dashboard-noticeDetail">
          Retrying less often until it answers.{' '}
          <button className="jp-vgpu-mod-link" onClick={props.onRetry}>
            Retry now
          </button>
        </p>
      </Notice>
    );
  } else {
    const nodes = sortNodes(view.nodes ?? []);
    const yours = new Map<string, number>();
    for (const s of view.slices ?? []) {
      yours.set(s.hostname, (yours.get(s.hostname) ?? 0) + 1);
    }
    note = `as ${view.prometheus} sees it · read ${clockTime(view.read_at, true)}`;
    body = (
      <>
        <h3 className="jp-vgpu-Dashboard-slicesTitle">
          Where there is room now
        </h3>
        {nodes.length === 0 ? (
          <p className="jp-vgpu-Dashboard-noSlices">
            No node has reported to Prometheus: run `jupyter vgpu exporter` on
            each GPU node and scrape it (docs/cluster.md).
          </p>
        ) : (
          <>
            <ClusterLegend />
            <ul className="jp-vgpu-ClusterNodes" aria-label="Nodes">
              {nodes.map(node => (
                <NodeCard
                  key={node.hostname}
                  node={node}
                  readAt={view.read_at}
                  yours={yours.get(node.hostname) ?? 0}
                  selected={selected === node.hostname}
                  onSelect={props.onSelect}
                />
              ))}
            </ul>
          </>
        )}
        {selected !== null && (
          <NodeHistory
            hostname={selected}
            history={props.history}
            readAt={view.read_at}
            onClose={() => props.onSelect(null)}
          />
        )}
        <h3 className="jp-vgpu-Dashboard-slicesTitle">
          Where your kernels run
        </h3>
        <YourSlices slices={view.slices ?? []} nodes={nodes} />
      </>
    );
  }
  return (
    <section
      className="jp-vgpu-Dashboard-gpu jp-vgpu-Cluster"
      aria-label="Cluster"
      data-state={state}
    >
      <h2 className="jp-vgpu-Dashboard-gpuTitle">
        Cluster
        {note && <span className="jp-vgpu-Dashboard-gpuNote">{note}</span>}
      </h2>
      {body}
    </section>
  );
}

/** How to read the nodes' bars, once. */
function ClusterLegend(): JSX.Element {
  const items: [string, string, string][] = [
    ['reserved', 'booked', "Memory every user's slices book: pale"],
    ['used', 'used', 'Memory in use: solid'],
    ['free', 'free', 'Memory a new slice could get: empty']
  ];
  return (
    <ul
      className="jp-vgpu-Legend jp-vgpu-ClusterLegend"
      aria-label="How to read the nodes' bars"
    >
      {items.map(([kind, label, title]) => (
        <li
          key={kind}
          className={`jp-vgpu-Legend-item jp-vgpu-mod-${kind}`}
          title={title}
        >
          <span
            className={`jp-vgpu-Legend-swatch jp-vgpu-mod-${kind}`}
            aria-hidden="true"
          />
          {label}
        </li>
      ))}
      <li className="jp-vgpu-Legend-item">one part per GPU</li>
    </ul>
  );
}

/** The section bound to its model. */
export function ClusterSection(props: {
  model: ClusterModel;
}): JSX.Element | null {
  const { model } = props;
  const [, setVersion] = React.useState(0);
  React.useEffect(() => {
    const changed = () => setVersion(n => n + 1);
    model.changed.connect(changed);
    return () => {
      model.changed.disconnect(changed);
    };
  }, [model]);
  const store = model.store;
  return (
    <ClusterView
      state={store.state}
      view={store.view}
      error={store.error}
      selected={model.selected}
      history={model.selectedHistory}
      onSelect={hostname => model.select(hostname)}
      onRetry={() => void model.refresh()}
    />
  );
}
