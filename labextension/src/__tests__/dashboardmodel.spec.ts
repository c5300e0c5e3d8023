/**
 * The GPU dashboard's model: how it polls the history.
 */
import { VGPUApiError } from '../api';
import { DashboardModel } from '../dashboardmodel';
import { IHistoryReply } from '../historyapi';
import { gpu, reply, T0 } from './historyfixtures';

describe('DashboardModel', () => {
  let replies: (IHistoryReply | Error)[];
  let since: (number | null | undefined)[];
  let model: DashboardModel;

  beforeEach(() => {
    jest.useFakeTimers({ doNotFake: ['Date', 'nextTick', 'queueMicrotask'] });
    replies = [];
    since = [];
    model = new DashboardModel({
      client: {
        history: (s?: number | null) => {
          since.push(s);
          const next = replies.shift();
          return next instanceof Error || next === undefined
            ? Promise.reject(next ?? new Error('no reply left'))
            : Promise.resolve(next);
        }
      }
    });
  });

  afterEach(() => {
    model.dispose();
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
