/**
 * The dashboard's cluster section as drawn from a `GET /api/vgpu/cluster` reply: where there is
 * room (the most room on one GPU first, stale nodes last, marked, their figures kept), unknown
 * figures as unknown, your slices by node, a node's history, and the faults.
 */
import * as React from 'react';

import { ClusterView, IClusterViewProps } from '../dashboard/cluster';
import {
  clusterHolderLabel,
  gpuModelText,
  nodeTotals,
  roomOnOneGPU,
  seenText,
  sliceGPUsText,
  slicesByNode,
  sliceSum,
  sortNodes,
  waitingText
} from '../format/cluster';
import { VGPUApiError } from '../store/api';
import { nodeHistoryPoints } from '../store/cluster';
import {
  clusterGPU,
  clusterNode,
  clusterReply,
  clusterSlice,
  GiB,
  nodeHistoryReply,
  PROBLEM,
  READ_AT
} from './clusterfixtures';
import { attr, render, tags, texts } from './render';

function view(props: Partial<IClusterViewProps> = {}): string {
  return render(
    <ClusterView
      state="shown"
      view={clusterReply()}
      error={null}
      selected={null}
      onSelect={() => undefined}
      onRetry={() => undefined}
      {...props}
    />
  );
}

/** The node cards' host names, in the order shown. */
function shownNodes(html: string): string[] {
  return tags(html, 'li', 'jp-vgpu-ClusterNode').map(
    t => attr(t, 'data-hostname') ?? ''
  );
}

/** The card of `hostname`, as HTML. */
function card(html: string, hostname: string): string {
  const start = html.indexOf(`data-hostname="${hostname}"`);
  expect(start).toBeGreaterThan(0);
  return html.slice(start, html.indexOf('</li>', start));
}

/** The figures of a card, by their `data-figure`. */
function figures(cardHtml: string): { [name: string]: string } {
  const out: { [name: string]: string } = {};
  const names = tags(cardHtml, 'span', 'jp-vgpu-ClusterNode-figure').map(
    t => attr(t, 'data-figure') ?? ''
  );
  texts(cardHtml, 'jp-vgpu-ClusterNode-value').forEach((value, i) => {
    out[names[i]] = value;
  });
  return out;
}

describe('the cluster in order and in words', () => {
  it('puts the most room on one GPU first, unknown room after, stale nodes last', () => {
    expect(sortNodes(clusterReply().nodes).map(n => n.hostname)).toEqual([
      'node-a', // 16 GiB free on its GPU 1
      'node-b', // 4 GiB
      'node-d', // unknown
      'node-c' // stale, though 80 GiB was free when it last reported
    ]);
  });

  it('orders nodes with the same room by host name, and stale ones by host name', () => {
    const nodes = [
      clusterNode('z', [clusterGPU(0, 0, 0)], { stale: true }),
      clusterNode('b', [clusterGPU(0, 0, 0)]),
      clusterNode('a', [clusterGPU(0, 0, 0)]),
      clusterNode('y', [clusterGPU(0, 8, 0)], { stale: true })
    ];
    expect(sortNodes(nodes).map(n => n.hostname)).toEqual(['a', 'b', 'y', 'z']);
  });

  it("sums a node's GPUs, and a sum with an unknown part is unknown", () => {
    const [b, d] = clusterReply().nodes;
    expect(nodeTotals(b)).toEqual({
      total: 16 * GiB,
      booked: 12 * GiB,
      used: 10 * GiB,
      free: 4 * GiB
    });
    expect(nodeTotals(d)).toEqual({
      total: 16 * GiB,
      booked: null,
      used: null,
      free: null
    });
    expect(nodeTotals(clusterNode('empty', [])).total).toBeNull();
  });

  it('says the room on one GPU as the most free of its GPUs, unknown when none is known', () => {
    const a = clusterNode('a', [clusterGPU(0, 4, 1), clusterGPU(1, 10, 0)]);
    expect(roomOnOneGPU(a)).toBe(12 * GiB);
    const partly = clusterNode('p', [
      clusterGPU(0, 4, 1, { free: null }),
      clusterGPU(1, 10, 0)
    ]);
    expect(roomOnOneGPU(partly)).toBe(6 * GiB); // as `jupyter vgpu status --cluster`
    expect(roomOnOneGPU(clusterReply().nodes[1])).toBeNull();
  });

  it("says a node's line, unknown as unknown and never as nobody", () => {
    const line = (requests: number | null, memory: number | null) =>
      waitingText(clusterNode('n', [], { waiting: { requests, memory } }));
    expect(line(0, 0)).toBe('none waiting');
    expect(line(2, 24 * GiB)).toBe('2 waiting for 24.0 GiB');
    expect(line(1, null)).toBe('1 waiting');
    expect(line(null, null)).toBe('–');
  });

  it("names the GPUs' model, and each model when they differ", () => {
    expect(gpuModelText(clusterReply().nodes[3])).toBe(
      '2 × Simulated GPU 16GiB'
    );
    const mixed = clusterNode(
      'm',
      [
        clusterGPU(0, 0, 0, { model: 'A100' }),
        clusterGPU(1, 0, 0, { model: 'H100' }),
        clusterGPU(2, 0, 0, { model: 'A100' })
      ],
      { model: null }
    );
    expect(gpuModelText(mixed)).toBe('2 × A100, 1 × H100');
    expect(gpuModelText(clusterNode('e', []))).toBe('no GPU read');
  });

  it('says when a node was seen, from the time of the read', () => {
    expect(seenText(clusterNode('n', []), READ_AT)).toBe('seen 3 s ago');
    expect(
      seenText(clusterNode('n', [], { last_seen: READ_AT - 91 }), READ_AT)
    ).toBe('seen 1 min 31 s ago');
    expect(seenText(clusterNode('n', [], { last_seen: null }), READ_AT)).toBe(
      'never seen'
    );
  });

  it("names a slice's holder as the other views do", () => {
    const [train, cmd] = clusterReply().slices;
    expect(clusterHolderLabel(train)).toBe('train.ipynb');
    expect(clusterHolderLabel(cmd)).toBe('python eval.py');
    expect(clusterHolderLabel(clusterSlice('s', 'n', { holder: '' }))).toBe(
      'slice s'
    );
  });

  it('groups your slices by node, with unknown GPUs and figures as unknown', () => {
    const groups = slicesByNode(clusterReply().slices);
    expect(groups.map(([host, s]) => [host, s.map(x => x.id)])).toEqual([
      ['node-a', ['train', 'cmd']],
      ['node-c', ['old']]
    ]);
    const old = groups[1][1][0];
    expect(sliceGPUsText(old)).toBe('GPU ?');
    expect(sliceSum(old, 'request')).toBe(8 * GiB);
    expect(sliceSum(old, 'used')).toBeNull();
  });

  it("turns a node's history into points, keeping what is unknown unknown", () => {
    const points = nodeHistoryPoints(nodeHistoryReply('node-a'));
    expect(points).toHaveLength(3);
    expect(points[2]).toEqual({
      t: READ_AT,
      total: 32 * GiB,
      booked: 4 * GiB,
      used: null,
      yours_booked: 4 * GiB,
      yours_used: null
    });
    expect(nodeHistoryPoints(null)).toEqual([]);
  });
});

describe('ClusterView', () => {
  it('is nothing at all on a server without a cluster view', () => {
    expect(view({ state: 'absent', view: null })).toBe('');
  });

  it('lists every node, the most room on one GPU first and the stale one last', () => {
    const html = view();
    expect(shownNodes(html)).toEqual(['node-a', 'node-b', 'node-d', 'node-c']);
    expect(texts(html, 'jp-vgpu-Dashboard-gpuNote')[0]).toContain(
      'as http://prometheus:9090 sees it'
    );
  });

  it("shows a node's figures: booked of total, used, free, room on one GPU, its line", () => {
    const a = card(view(), 'node-a');
    expect(texts(a, 'jp-vgpu-ClusterNode-name')).toEqual(['node-a']);
    expect(texts(a, 'jp-vgpu-ClusterNode-model')).toEqual([
      '2 × Simulated GPU 16GiB'
    ]);
    expect(figures(a)).toEqual({
      booked: '4.0 / 32.0 GiB',
      used: '1.0 GiB',
      free: '28.0 GiB',
      room: '16.0 GiB',
      line: 'none waiting'
    });
    expect(texts(a, 'jp-vgpu-ClusterNode-seen')).toEqual(['seen 3 s ago']);
    expect(figures(card(view(), 'node-b')).line).toBe('2 waiting for 24.0 GiB');
    // one part of the bar per GPU, booked and used in proportion
    const parts = tags(a, 'div', 'jp-vgpu-ClusterBar-gpu');
    expect(parts).toHaveLength(2);
    expect(attr(tags(a, 'div', 'jp-vgpu-ClusterBar-booked')[0], 'style')).toBe(
      'width:25.000%'
    );
  });

  it('shows unknown figures as unknown, never as 0', () => {
    const d = figures(card(view(), 'node-d'));
    expect(d).toEqual({
      booked: '– / 16.0 GiB',
      used: '–',
      free: '–',
      room: '–',
      line: 'none waiting'
    });
  });

  it('marks a stale node, says why, and keeps its last figures', () => {
    const c = card(view(), 'node-c');
    const html = view();
    const tag = tags(html, 'li', 'jp-vgpu-mod-stale');
    expect(tag.map(t => attr(t, 'data-hostname'))).toEqual(['node-c']);
    expect(texts(c, 'jp-vgpu-Chip')).toContain('stale');
    expect(texts(c, 'jp-vgpu-ClusterNode-problem')).toEqual([PROBLEM]);
    expect(figures(c)).toMatchObject({
      booked: '0.0 / 80.0 GiB',
      free: '80.0 GiB',
      room: '80.0 GiB'
    });
    expect(texts(c, 'jp-vgpu-ClusterNode-seen')).toEqual(['seen 4 min ago']);
  });

  it('marks the nodes that hold your slices', () => {
    const html = view();
    const yours = tags(html, 'li', 'jp-vgpu-mod-yours');
    expect(
      yours.map(t => [attr(t, 'data-hostname'), attr(t, 'data-yours')])
    ).toEqual([
      ['node-a', '2'],
      ['node-c', '1']
    ]);
    expect(texts(card(html, 'node-a'), 'jp-vgpu-mod-yours')).toContain(
      '2 of your slices'
    );
    expect(texts(card(html, 'node-c'), 'jp-vgpu-mod-yours')).toContain(
      'your slice'
    );
    expect(tags(card(html, 'node-b'), 'span', 'jp-vgpu-mod-yours')).toEqual([]);
  });

  it('lists your slices by node: GPU, holder, request, used, tier', () => {
    const html = view();
    expect(texts(html, 'jp-vgpu-ClusterSlices-node')).toEqual([
      'node-a',
      'node-cstale'
    ]);
    expect(texts(html, 'jp-vgpu-ClusterSlices-holder')).toEqual([
      'train.ipynb',
      'python eval.py',
      'old.ipynb'
    ]);
    expect(texts(html, 'jp-vgpu-ClusterSlices-gpu')).toEqual([
      'GPU 0',
      'GPU 0',
      'GPU ?'
    ]);
    expect(texts(html, 'jp-vgpu-ClusterSlices-request')).toEqual([
      '4.0 GiB',
      '4.0 GiB',
      '8.0 GiB'
    ]);
    expect(texts(html, 'jp-vgpu-ClusterSlices-used')).toEqual([
      '1.0 GiB',
      '1.0 GiB',
      '–'
    ]);
    expect(texts(html, 'jp-vgpu-ClusterSlices-tier')).toEqual([
      'cooperative',
      'hard (MPS)',
      'cooperative'
    ]);
  });

  it('says so when you hold no slice on any node', () => {
    const html = view({ view: clusterReply({ slices: [] }) });
    expect(texts(html, 'jp-vgpu-ClusterSlices-none')).toEqual([
      'You hold no slice on any node.'
    ]);
    expect(tags(html, 'li', 'jp-vgpu-mod-yours')).toEqual([]);
  });

  it("says the server's sentence when Prometheus is down, and shows no node", () => {
    const message =
      'The cluster view cannot be shown: Prometheus at http://prometheus:9090 cannot be reached: Connection refused. Every view of this node works as before.';
    const html = view({
      state: 'failed',
      error: new VGPUApiError(message, 503)
    });
    expect(texts(html, 'jp-vgpu-Dashboard-noticeTitle')).toEqual([message]);
    expect(
      tags(html, 'div', 'jp-vgpu-mod-error').map(t => attr(t, 'role'))
    ).toEqual(['alert']);
    expect(shownNodes(html)).toEqual([]);
  });

  it("charts the picked node's memory: total, booked, used and yours", () => {
    const html = view({
      selected: 'node-a',
      history: {
        hostname: 'node-a',
        reply: nodeHistoryReply('node-a'),
        error: null,
        readAt: 1
      }
    });
    const charts = tags(html, 'figure', 'jp-vgpu-Dashboard-chart');
    expect(
      charts.map(t => [attr(t, 'data-chart'), attr(t, 'data-hostname')])
    ).toEqual([['node', 'node-a']]);
    const keys = texts(html, 'jp-vgpu-Dashboard-key');
    expect(keys).toEqual([
      'used –',
      'booked 4.0 GiB',
      'total 32.0 GiB',
      'yours used –',
      'yours booked 4.0 GiB'
    ]);
    expect(
      tags(html, 'svg', 'jp-vgpu-TimeSeries-svg').map(t =>
        attr(t, 'data-points')
      )
    ).toEqual(['3']);
    expect(
      tags(html, 'button', 'jp-vgpu-ClusterNode-name').map(t =>
        attr(t, 'aria-pressed')
      )
    ).toEqual(['true', 'false', 'false', 'false']);
  });

  it("says why a node's history does not show", () => {
    const html = view({
      selected: 'node-x',
      history: {
        hostname: 'node-x',
        reply: null,
        error:
          'No node named node-x has reported to Prometheus at http://prometheus:9090 in the last 7 days.',
        readAt: 1
      }
    });
    expect(texts(html, 'jp-vgpu-Dashboard-noticeTitle')).toEqual([
      'No node named node-x has reported to Prometheus at http://prometheus:9090 in the last 7 days.'
    ]);
    expect(
      texts(view({ selected: 'node-a' }), 'jp-vgpu-Dashboard-noticeTitle')
    ).toEqual(["Reading node-a's history…"]);
  });
});
