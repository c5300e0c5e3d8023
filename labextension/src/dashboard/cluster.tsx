/**
 * The GPU dashboard's cluster section (a site's Prometheus, through `GET /api/vgpu/cluster`):
 * where there is room now (a card per node, the most room on one GPU first, stale nodes last and
 * marked, with their figures kept), where your kernels run (your slices by node), and a picked
 * node's memory over the last hour. Hidden entirely on a server without a cluster view.
 */
import * as React from 'react';

import { Legend, useChanged } from '../charts/legend';
import { clockTime } from '../charts/scales';
import { sortNodes } from '../format/format';
import { VGPUApiError } from '../store/api';
import { ClusterState, INodeHistoryState } from '../store/cluster';
import type { IClusterReply } from '../store/clustertypes';
import { NodeCard } from './clusternode';
import { ClusterModel } from './clustermodel';
import { NodeHistory } from './nodehistory';
import { Notice } from './notice';
import { YourSlices } from './yourslices';

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
  return (
    <Legend
      keys={[
        ['reserved', 'booked', "Memory every user's slices book: pale"],
        ['used', 'used', 'Memory in use: solid'],
        ['free', 'free', 'Memory a new slice could get: empty']
      ]}
      label="How to read the nodes' bars"
      className="jp-vgpu-ClusterLegend"
    >
      <li className="jp-vgpu-Legend-item">one part per GPU</li>
    </Legend>
  );
}

/** The section bound to its model. */
export function ClusterSection(props: {
  model: ClusterModel;
}): JSX.Element | null {
  const { model } = props;
  useChanged(model);
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
