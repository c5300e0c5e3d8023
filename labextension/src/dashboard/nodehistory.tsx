/**
 * A node's memory over the last hour (the cluster section, once a node is picked): total,
 * booked, used and yours, with the dashboard's chart card.
 */
import * as React from 'react';

import {
  INodeHistoryState,
  NODE_HISTORY_SECONDS,
  nodeHistoryPoints
} from '../store/cluster';
import { ChartCard } from './chartcard';
import { nodeHistoryChart } from './dashboardcharts';
import { Notice } from './notice';

/** Successive points more than this many steps apart are not joined (as the dashboard's). */
const GAP_STEPS = 3.5;

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
