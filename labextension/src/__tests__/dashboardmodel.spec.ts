/**
 * The GPU dashboard's model: how it reads the history through the one store.
 */
import {
  IDevicesReply,
  ISampleQuery,
  ISampleReply,
  VGPUApiError,
  VGPUClient
} from '../store/api';
import { DashboardModel } from '../dashboard/dashboardmodel';
import { IHistoryReply } from '../store/historyapi';
import { GPUModel } from '../store/model';
import { gpu, reply, T0 } from './historyfixtures';

/** A server with no GPU. */
function devicesReply(): IDevicesReply {
  return {
    simulated: true,
    available: false,
    message: null,
    driver: 'simulated',
    interval: 2,
    devices: []
  };
}

describe('DashboardModel', () => {
  let replies: (IHistoryReply | Error)[];
  let since: (number | null | undefined)[];
  let model: DashboardModel;
  let samples: GPUModel;

  beforeEach(() => {
    jest.useFakeTimers({ doNotFake: ['Date', 'nextTick', 'queueMicrotask'] });
    replies = [];
    since = [];
    // The store the dashboard reads, on a server whose sample answers the history asked for.
    const history = (s?: number | null) => {
      since.push(s);
      const next = replies.shift();
      return next instanceof Error || next === undefined
        ? Promise.reject(next ?? new Error('no reply left'))
        : Promise.resolve(next);
    };
    const client = {
      sample: async (query: ISampleQuery): Promise<ISampleReply> => ({
        slices: { simulated: true, interval: 2, slices: [], waiting: [] },
        devices: query.devices !== undefined ? devicesReply() : undefined,
        history:
          query.history !== undefined ? await history(query.history) : undefined
      })
    };
    samples = new GPUModel({
      client: client as unknown as VGPUClient,
      interval: 60 * 1000
    });
    model = new DashboardModel({ model: samples });
  });

  afterEach(() => {
    model.dispose();
    samples.dispose();
    jest.clearAllTimers();
    jest.useRealTimers();
  });

  async function refreshed(): Promise<void> {
    const changed = new Promise<void>(resolve => {
      const done = () => {
        model.changed.disconnect(done);
        resolve();
      };
      model.changed.connect(done);
    });
    await model.refresh();
    await jest.advanceTimersByTimeAsync(0);
    await changed;
  }

  it('appends what follows each reply, and keeps it under an error', async () => {
    replies.push(
      reply(T0 + 10, [gpu('GPU-0', 0, [T0, T0 + 10])]),
      reply(T0 + 20, [gpu('GPU-0', 0, [T0 + 20])]),
      new VGPUApiError('Down.', 502)
    );
    expect(model.loading).toBe(true);
    await refreshed();
    expect(model.loading).toBe(false);
    await refreshed();
    expect(since).toEqual([null, T0 + 10]);
    expect(model.store.gpus[0].points.map(p => p.t)).toEqual([
      T0,
      T0 + 10,
      T0 + 20
    ]);
    await refreshed();
    expect(model.error?.message).toBe('Down.');
    expect(model.store.gpus[0].points).toHaveLength(3);
  });
});
