/**
 * "Where your kernels run": the user's slices on every node, by node (the cluster section).
 */
import * as React from 'react';

import {
  clusterHolderLabel,
  clusterTierText,
  formatBytes,
  sliceGPUsText,
  slicesByNode,
  sliceSum
} from '../format/format';
import type { IClusterNode, IClusterSlice } from '../store/clustertypes';

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
