/**
 * The dashboard's history: the request, and the points appended reply by reply.
 */
import { ServerConnection } from '@jupyterlab/services';

import { VGPUApiError } from '../store/api';
import {
  appendPoints,
  HistoryClient,
  historyRoute,
  HistoryStore
} from '../store/historyapi';
import { gpu, reply, slice } from './historyfixtures';

const times = (points: { t: number }[]) => points.map(p => p.t);

describe('appendPoints', () => {
  it('appends only points after the last one kept, and copies', () => {
    const kept = [{ t: 1 }, { t: 2 }];
    const out = appendPoints(
      kept,
      [{ t: 2 }, { t: 3 }, { t: 3 }, { t: 4 }],
      100
    );
    expect(times(out)).toEqual([1, 2, 3, 4]);
    expect(times(kept)).toEqual([1, 2]);
  });

  it('keeps `seconds` before the newest point', () => {
    const out = appendPoints([{ t: 0 }, { t: 10 }], [{ t: 20 }, { t: 30 }], 20);
    expect(times(out)).toEqual([10, 20, 30]);
  });

  it('skips what is not a point', () => {
    const fresh = [null, { t: 'late' }, { t: 5 }] as any[];
    expect(times(appendPoints(undefined, fresh, 100))).toEqual([5]);
    expect(appendPoints(undefined, undefined, 100)).toEqual([]);
  });
});

describe('HistoryStore', () => {
  it('asks for everything first, then for what follows the last reply', () => {
    const store = new HistoryStore();
    expect(store.since).toBeNull();
    expect(store.latest).toBeNull();
    expect(store.step).toBe(10);
    store.apply(reply(100, [gpu('GPU-0', 0, [90, 100])]));
    expect(store.since).toBe(100);
    expect(historyRoute(store.since)).toBe('history?since=100');
    expect(historyRoute(null)).toBe('history');
  });

  it('appends each GPU and slice its new points', () => {
    const store = new HistoryStore();
    store.apply(reply(20, [gpu('GPU-0', 0, [10, 20])], [slice('a', [10, 20])]));
    store.apply(reply(30, [gpu('GPU-0', 0, [30])], [slice('a', [30])]));
    expect(times(store.gpus[0].points)).toEqual([10, 20, 30]);
    expect(times(store.slices[0].points)).toEqual([10, 20, 30]);
  });

  it("keeps up to the server's `seconds`", () => {
    const store = new HistoryStore();
    store.apply(reply(20, [gpu('GPU-0', 0, [0, 10, 20])], [], { seconds: 15 }));
    store.apply(reply(30, [gpu('GPU-0', 0, [30])], [], { seconds: 15 }));
    expect(times(store.gpus[0].points)).toEqual([20, 30]);
    expect(store.seconds).toBe(15);
  });

  it('drops the slices (and GPUs) a reply no longer lists, and takes new ones', () => {
    const store = new HistoryStore();
    store.apply(reply(10, [gpu('GPU-0', 0, [10])], [slice('a', [10])]));
    store.apply(reply(20, [gpu('GPU-0', 0, [20])], [slice('b', [20])]));
    expect(store.slices.map(s => s.id)).toEqual(['b']);
    expect(times(store.slices[0].points)).toEqual([20]);
    store.apply(reply(30, [], []));
    expect(store.gpus).toEqual([]);
  });

  it('orders the GPUs by index and finds the slices on each', () => {
    const store = new HistoryStore();
    const other = { ...slice('b', [10]), gpus: ['GPU-1'], gpu_indices: [1] };
    store.apply(
      reply(
        10,
        [gpu('GPU-1', 1, [10]), gpu('GPU-0', 0, [10])],
        [slice('a', [10]), other]
      )
    );
    expect(store.gpus.map(g => g.index)).toEqual([0, 1]);
    expect(store.slicesOn(store.gpus[0]).map(s => s.id)).toEqual(['a']);
    expect(store.slicesOn(store.gpus[1]).map(s => s.id)).toEqual(['b']);
  });

  it('takes a reply without taken_at whole', () => {
    const store = new HistoryStore();
    store.apply(reply(10, [gpu('GPU-0', 0, [0, 10])]));
    store.apply(reply(undefined as unknown as number, [gpu('GPU-0', 0, [5])]));
    expect(times(store.gpus[0].points)).toEqual([5]);
    expect(store.since).toBeNull();
  });
});

describe('HistoryClient', () => {
  function client(respond: (url: string) => Response): {
    client: HistoryClient;
    urls: string[];
  } {
    const urls: string[] = [];
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/lab-base/',
      fetch: (input: RequestInfo) => {
        const url = typeof input === 'string' ? input : input.url;
        urls.push(url);
        return Promise.resolve(respond(url));
      }
    });
    return { client: new HistoryClient(settings), urls };
  }

  it("asks the server's history route with since", async () => {
    const body = reply(5, []);
    const { client: c, urls } = client(
      () => new Response(JSON.stringify(body), { status: 200 })
    );
    await expect(c.history()).resolves.toEqual(body);
    await c.history(5);
    expect(urls.map(u => u.split('?')[0])).toEqual([
      'http://localhost:8888/lab-base/api/vgpu/history',
      'http://localhost:8888/lab-base/api/vgpu/history'
    ]);
    expect(urls[1]).toContain('since=5');
  });

  it("fails with the server's message", async () => {
    const { client: c } = client(
      () =>
        new Response(JSON.stringify({ message: 'No history here.' }), {
          status: 500
        })
    );
    await expect(c.history()).rejects.toEqual(
      new VGPUApiError('No history here.', 500)
    );
  });
});
