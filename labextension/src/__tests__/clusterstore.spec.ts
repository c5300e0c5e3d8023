/**
 * The cluster in the one store: read beside the sample every few seconds while the dashboard
 * shows, never while it is hidden; gone for good on a server without a cluster view (404); one
 * sentence while Prometheus is down (503), the rest of the store reading as before; a picked
 * node's history read with it.
 */
import { ServerConnection } from '@jupyterlab/services';

import { ClusterModel } from '../dashboard/clustermodel';
import { VGPUClient } from '../store/api';
import { CLUSTER_INTERVAL_MS } from '../store/cluster';
import { GPUModel } from '../store/model';
import { clusterReply, nodeHistoryReply } from './clusterfixtures';

/** The poll's tick, as the extension's default. */
const TICK_MS = 2 * 1000;

const DOWN =
  'The cluster view cannot be shown: Prometheus at http://prometheus:9090 cannot be reached: Connection refused. Every view of this node works as before.';

/**
 * A jupyter-vgpu server behind `fetch`: the sample always answers; the cluster answers as
 * `cluster` says (a reply, 404 without Prometheus, 503 with Prometheus down), a node's history
 * as `history` says. It records each route asked.
 */
class FakeServer {
  cluster: 'ok' | 404 | 503 = 'ok';
  history: 'ok' | 404 | 'none' = 'ok';
  requests: string[] = [];
  readonly settings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/lab-base/',
    fetch: (input: RequestInfo, init?: RequestInit) =>
      Promise.resolve(this.answer(new Request(input, init)))
  });

  answer(request: Request): Response {
    const url = new URL(request.url);
    const route = url.pathname.replace('/lab-base/api/vgpu/', '');
    // Without the cache buster JupyterLab adds to every GET (`?1712345678901`).
    const query = Array.from(url.searchParams.keys()).filter(
      key => !/^\d+$/.test(key)
    );
    const search = query
      .map(key => `${key}=${url.searchParams.get(key)}`)
      .join('&');
    this.requests.push(search ? `${route}?${search}` : route);
    const json = (body: unknown, status = 200) =>
      new Response(JSON.stringify(body), { status });
    if (route === 'sample') {
      return json({
        slices: { simulated: true, interval: 2, slices: [], waiting: [] },
        devices: {
          simulated: true,
          available: true,
          message: null,
          driver: 'simulated',
          interval: 2,
          devices: []
        }
      });
    }
    if (route === 'cluster') {
      if (this.cluster === 404) {
        return json({ message: 'This server has no cluster view.' }, 404);
      }
      return this.cluster === 503
        ? json({ message: DOWN }, 503)
        : json(clusterReply());
    }
    const node = /^cluster\/nodes\/([^/]+)\/history$/.exec(route);
    if (node) {
      const hostname = decodeURIComponent(node[1]);
      if (this.history === 'none') {
        return new Response('Not Found', { status: 404 }); // an older server's tornado
      }
      return this.history === 404
        ? json(
            {
              message: `No node named ${hostname} has reported to Prometheus at http://prometheus:9090 in the last 7 days.`
            },
            404
          )
        : json(nodeHistoryReply(hostname));
    }
    return json({ message: 'no' }, 404);
  }

  /** The routes asked since the last call, less the sample's. */
  asked(): string[] {
    return this.requests.splice(0).filter(r => !r.startsWith('sample'));
  }
}

describe('the cluster in the one store', () => {
  let server: FakeServer;
  let model: GPUModel;
  let cluster: ClusterModel;
  let visible: boolean;

  beforeEach(async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'queueMicrotask'] });
    server = new FakeServer();
    visible = true;
    model = new GPUModel({
      client: new VGPUClient(server.settings),
      interval: TICK_MS
    });
    cluster = new ClusterModel({ model, isVisible: () => visible });
  });

  afterEach(() => {
    cluster.dispose();
    model.dispose();
    jest.clearAllTimers();
    jest.useRealTimers();
  });

  async function start(): Promise<void> {
    model.start();
    await jest.advanceTimersByTimeAsync(0);
  }

  it('reads the cluster beside the sample every few seconds while the dashboard shows', async () => {
    await start();
    expect(server.asked()).toEqual(['cluster']);
    expect(cluster.store.state).toBe('shown');
    expect(cluster.store.view?.nodes).toHaveLength(4);

    await jest.advanceTimersByTimeAsync(TICK_MS);
    expect(server.asked()).toEqual([]); // not due yet
    await jest.advanceTimersByTimeAsync(CLUSTER_INTERVAL_MS);
    expect(server.asked()).toEqual(['cluster']);

    visible = false; // another tab of the main area in front
    await jest.advanceTimersByTimeAsync(4 * CLUSTER_INTERVAL_MS);
    expect(server.asked()).toEqual([]);
  });

  it('is gone for good on a server without a cluster view, until asked again', async () => {
    server.cluster = 404;
    await start();
    expect(server.asked()).toEqual(['cluster']);
    expect(cluster.store.state).toBe('absent');
    expect(cluster.store.view).toBeNull();
    await jest.advanceTimersByTimeAsync(10 * CLUSTER_INTERVAL_MS);
    expect(server.asked()).toEqual([]);

    server.cluster = 'ok'; // the Refresh button asks again
    await cluster.refresh();
    await jest.advanceTimersByTimeAsync(0);
    expect(server.asked()).toEqual(['cluster']);
    expect(cluster.store.state).toBe('shown');
  });

  it("says the server's sentence while Prometheus is down, and the rest reads as before", async () => {
    await start();
    server.cluster = 503;
    await jest.advanceTimersByTimeAsync(CLUSTER_INTERVAL_MS);
    expect(cluster.store.state).toBe('failed');
    expect(cluster.store.error?.message).toBe(DOWN);
    expect(cluster.store.error?.status).toBe(503);
    expect(model.error).toBeNull(); // the GPUs, the slices, the line: as before
    expect(model.snapshot).not.toBeNull();

    // It asks less often while Prometheus is down, and shows the nodes once it answers.
    server.asked();
    await jest.advanceTimersByTimeAsync(CLUSTER_INTERVAL_MS);
    expect(server.asked()).toEqual([]);
    server.cluster = 'ok';
    await jest.advanceTimersByTimeAsync(CLUSTER_INTERVAL_MS);
    expect(server.asked()).toEqual(['cluster']);
    expect(cluster.store.state).toBe('shown');
    expect(cluster.store.error).toBeNull();
  });

  it("reads a picked node's last hour at once, and again with the cluster", async () => {
    await start();
    server.asked();
    cluster.select('node a');
    await jest.advanceTimersByTimeAsync(0);
    expect(server.asked()).toEqual([
      'cluster/nodes/node%20a/history?seconds=3600'
    ]);
    expect(cluster.selectedHistory?.reply?.t).toHaveLength(3);
    expect(cluster.selectedHistory?.error).toBeNull();

    // Its step is a minute: not read again before.
    await jest.advanceTimersByTimeAsync(CLUSTER_INTERVAL_MS);
    expect(server.asked()).toEqual(['cluster']);
    await jest.advanceTimersByTimeAsync(60 * 1000);
    expect(server.asked()).toContain(
      'cluster/nodes/node%20a/history?seconds=3600'
    );

    cluster.select('node a'); // picked again: hidden
    expect(cluster.selected).toBeNull();
    expect(cluster.selectedHistory).toBeUndefined();
  });

  it("says the server's sentence when Prometheus has no history of the node", async () => {
    server.history = 404;
    await start();
    cluster.select('node-x');
    await jest.advanceTimersByTimeAsync(0);
    expect(cluster.selectedHistory?.reply).toBeNull();
    expect(cluster.selectedHistory?.error).toBe(
      'No node named node-x has reported to Prometheus at http://prometheus:9090 in the last 7 days.'
    );
    expect(cluster.store.state).toBe('shown');
  });

  it('says so when the server has no history route', async () => {
    server.history = 'none';
    await start();
    cluster.select('node-a');
    await jest.advanceTimersByTimeAsync(0);
    expect(cluster.selectedHistory?.error).toBe(
      "This server cannot show node-a's history."
    );
  });
});
