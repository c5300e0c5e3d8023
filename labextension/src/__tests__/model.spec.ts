/**
 * The model's history and colour bookkeeping, and its polls against a fake client (a plain
 * object that answers the model's one call with a reply per part asked).
 */
import {
  IDevice,
  IDevicesReply,
  ISampleQuery,
  ISampleReply,
  ISlice,
  ISlicesReply,
  VGPUApiError,
  VGPUClient
} from '../api';
import {
  appendHistory,
  GPUModel,
  HISTORY_SECONDS,
  PALETTE_SIZE
} from '../model';
import { makeSlice, points } from './fixtures';

describe('appendHistory', () => {
  it('starts from nothing', () => {
    expect(appendHistory(undefined, undefined)).toEqual([]);
    expect(appendHistory(undefined, points(1, 2))).toEqual(points(1, 2));
  });

  it('appends only the points after the last one kept, and copies', () => {
    const kept = points(1, 2, 3);
    const out = appendHistory(kept, points(2, 3, 4, 5));
    expect(out).toEqual(points(1, 2, 3, 4, 5));
    expect(kept).toEqual(points(1, 2, 3));
  });

  it('skips what is not a point', () => {
    const fresh = [null, { t: 'late' }, ...points(4)] as any[];
    expect(appendHistory(points(3), fresh)).toEqual(points(3, 4));
  });

  it('drops what is older than HISTORY_SECONDS before the newest point', () => {
    const newest = 1000;
    const out = appendHistory(
      points(newest - HISTORY_SECONDS - 1, newest - HISTORY_SECONDS),
      points(newest)
    );
    expect(out).toEqual(points(newest - HISTORY_SECONDS, newest));
  });

  it('keeps at most 240 points', () => {
    const many = points(...Array.from({ length: 300 }, (_, i) => i * 0.5));
    const out = appendHistory(undefined, many);
    expect(out).toHaveLength(240);
    expect(out[out.length - 1]).toEqual(many[many.length - 1]);
  });
});

/** A GPU as `GET /api/vgpu/devices` describes it. */
function device(uuid: string, history = points(1)): IDevice {
  return {
    index: 0,
    uuid,
    name: 'Simulated GPU',
    memory_total: 16 * 1024 ** 3,
    memory_used: 0,
    memory_reserved: 0,
    memory_used_by_slices: 0,
    memory_over_use: 0,
    memory_foreign: 0,
    memory_free: 16 * 1024 ** 3,
    utilization: 0,
    utilization_history: [],
    history,
    mig_mode: false,
    tier: 'cooperative',
    slices: []
  };
}

/** Replies the fake server gives, one per part asked, and the `since` each part was asked with. */
class FakeClient {
  devicesReplies: (IDevicesReply | Error)[] = [];
  slicesReplies: (ISlicesReply | Error)[] = [];
  devicesSince: (number | null | undefined)[] = [];
  slicesSince: (number | null | undefined)[] = [];

  devices(since?: number | null): Promise<IDevicesReply> {
    this.devicesSince.push(since);
    return FakeClient.answer(this.devicesReplies.shift());
  }

  slices(since?: number | null): Promise<ISlicesReply> {
    this.slicesSince.push(since);
    return FakeClient.answer(this.slicesReplies.shift());
  }

  /** `GET /api/vgpu/sample`: the replies above, as one (the GPUs only when asked). */
  async sample(query: ISampleQuery): Promise<ISampleReply> {
    const [devices, slices] = await Promise.all([
      query.devices !== undefined ? this.devices(query.devices) : undefined,
      this.slices(query.since)
    ]);
    return devices ? { slices, devices } : { slices };
  }

  private static answer<T>(reply: T | Error | undefined): Promise<T> {
    if (reply === undefined) {
      return Promise.reject(new Error('no reply left'));
    }
    return reply instanceof Error
      ? Promise.reject(reply)
      : Promise.resolve(reply);
  }
}

function devicesReply(devices: IDevice[], takenAt?: number): IDevicesReply {
  return {
    simulated: true,
    available: true,
    message: null,
    driver: 'simulated',
    interval: 2,
    taken_at: takenAt,
    devices
  };
}

function slicesReply(slices: ISlice[], takenAt?: number): ISlicesReply {
  return {
    simulated: true,
    interval: 2,
    taken_at: takenAt,
    slices,
    waiting: []
  };
}

describe('GPUModel', () => {
  let client: FakeClient;
  let visible: boolean;
  let model: GPUModel;

  beforeEach(() => {
    // The poll's timers are the test's: a disposed Poll leaves its next tick scheduled.
    jest.useFakeTimers({ doNotFake: ['Date', 'nextTick', 'queueMicrotask'] });
    client = new FakeClient();
    visible = true;
    model = new GPUModel({
      client: client as unknown as VGPUClient,
      interval: 60 * 1000
    });
    model.subscribe(() => ({ devices: visible })); // the sidebar, shown or not
  });

  afterEach(() => {
    model.dispose();
    jest.clearAllTimers();
    jest.useRealTimers();
  });

  /** Refresh, and wait until the model says it has. */
  async function refreshed(): Promise<void> {
    const changed = new Promise<void>(resolve => {
      const done = () => {
        model.changed.disconnect(done);
        resolve();
      };
      model.changed.connect(done);
    });
    await model.refresh();
    await jest.advanceTimersByTimeAsync(0); // the refresh runs at once
    await changed;
  }

  it('loads until the first refresh, then holds what the server said', async () => {
    const slice = makeSlice({ id: 'a', history: points(5, 6) });
    client.devicesReplies.push(devicesReply([device('GPU-0', points(5))], 100));
    client.slicesReplies.push(slicesReply([slice], 100));
    expect(model.loading).toBe(true);
    expect(model.snapshot).toBeNull();

    await refreshed();

    expect(model.loading).toBe(false);
    expect(model.error).toBeNull();
    expect(model.snapshot?.slices.slices).toEqual([slice]);
    expect(model.slice('a')).toEqual(slice);
    expect(model.slice('b')).toBeUndefined();
    expect(model.sliceHistory('a')).toEqual(points(5, 6));
    expect(model.deviceHistory('GPU-0')).toEqual(points(5));
    expect(model.sliceHistory('b')).toEqual([]);
    expect(client.devicesSince).toEqual([null]);
    expect(client.slicesSince).toEqual([null]);
  });

  it("asks for history after the previous reply's taken_at and appends it", async () => {
    client.devicesReplies.push(
      devicesReply([device('GPU-0', points(1, 2))], 2),
      devicesReply([device('GPU-0', points(3))], 3)
    );
    client.slicesReplies.push(
      slicesReply([makeSlice({ id: 'a', history: points(1, 2) })], 2),
      slicesReply([makeSlice({ id: 'a', history: points(3) })], 3)
    );

    await refreshed();
    await refreshed();

    expect(client.devicesSince).toEqual([null, 2]);
    expect(client.slicesSince).toEqual([null, 2]);
    expect(model.sliceHistory('a')).toEqual(points(1, 2, 3));
    expect(model.deviceHistory('GPU-0')).toEqual(points(1, 2, 3));
  });

  it('takes the whole history each time from a server without taken_at', async () => {
    client.devicesReplies.push(
      devicesReply([device('GPU-0', points(1, 2))]),
      devicesReply([device('GPU-0', points(2, 3))])
    );
    client.slicesReplies.push(
      slicesReply([makeSlice({ id: 'a', history: points(1, 2) })]),
      slicesReply([makeSlice({ id: 'a', history: points(2, 3) })])
    );

    await refreshed();
    await refreshed();

    expect(client.slicesSince).toEqual([null, null]);
    expect(model.sliceHistory('a')).toEqual(points(2, 3));
    expect(model.deviceHistory('GPU-0')).toEqual(points(2, 3));
  });

  it('forgets the history of a slice that is gone', async () => {
    client.devicesReplies.push(
      devicesReply([device('GPU-0')], 2),
      devicesReply([device('GPU-0')], 3)
    );
    client.slicesReplies.push(
      slicesReply([makeSlice({ id: 'a', history: points(1) })], 2),
      slicesReply([makeSlice({ id: 'b', history: points(3) })], 3)
    );

    await refreshed();
    await refreshed();

    expect(model.sliceHistory('a')).toEqual([]);
    expect(model.sliceHistory('b')).toEqual(points(3));
  });

  it('asks for the GPUs only while the sidebar shows', async () => {
    client.devicesReplies.push(devicesReply([device('GPU-0')], 2));
    client.slicesReplies.push(slicesReply([], 2), slicesReply([], 3));

    await refreshed();
    visible = false;
    await refreshed();

    expect(client.devicesSince).toHaveLength(1);
    expect(client.slicesSince).toEqual([null, 2]);
    expect(model.snapshot?.devices.devices.map(d => d.uuid)).toEqual(['GPU-0']);
  });

  it('keeps the last good data while the server fails', async () => {
    client.devicesReplies.push(
      devicesReply([device('GPU-0')], 2),
      new VGPUApiError('Gone fishing.', 503)
    );
    client.slicesReplies.push(
      slicesReply([makeSlice({ id: 'a' })], 2),
      slicesReply([], 3)
    );

    await refreshed();
    const good = model.snapshot;
    await refreshed();

    expect(model.snapshot).toBe(good);
    expect(model.error).toBeInstanceOf(VGPUApiError);
    expect(model.error?.message).toBe('Gone fishing.');
    expect(model.error?.status).toBe(503);
  });

  it('wraps any other failure as a VGPUApiError with status 0', async () => {
    client.devicesReplies.push(new TypeError('Failed to fetch'));
    client.slicesReplies.push(slicesReply([], 2));

    await refreshed();

    expect(model.loading).toBe(false);
    expect(model.snapshot).toBeNull();
    expect(model.error).toBeInstanceOf(VGPUApiError);
    expect(model.error?.status).toBe(0);
    expect(model.error?.message).toContain('Failed to fetch');
  });

  it("estimates the server's clock from taken_at", async () => {
    const serverTime = Date.now() / 1000 - 3600; // the server's clock is an hour behind
    client.devicesReplies.push(devicesReply([], serverTime));
    client.slicesReplies.push(slicesReply([], serverTime));

    await refreshed();

    expect(Math.abs(model.serverNow() - serverTime)).toBeLessThan(5);
  });

  it('gives each slice a lasting colour, the least used one', async () => {
    const ids = Array.from({ length: PALETTE_SIZE + 1 }, (_, i) => `s${i}`);
    const colours = ids.map(id => model.colour(id));
    expect(colours.slice(0, PALETTE_SIZE)).toEqual(
      Array.from({ length: PALETTE_SIZE }, (_, i) => i)
    );
    expect(colours[PALETTE_SIZE]).toBe(0); // all used once: the first again
    expect(model.colour('s3')).toBe(3);

    // Once s1 is gone, its colour is the least used.
    client.devicesReplies.push(devicesReply([], 2));
    client.slicesReplies.push(
      slicesReply(
        ids.filter(id => id !== 's1').map(id => makeSlice({ id })),
        2
      )
    );
    await refreshed();
    expect(model.colour('new')).toBe(1);
    expect(model.colour('s3')).toBe(3);
  });

  it('polls at its interval once started', async () => {
    for (const t of [2, 3, 4, 5]) {
      client.devicesReplies.push(devicesReply([], t));
      client.slicesReplies.push(slicesReply([], t));
    }
    model.start();
    await jest.advanceTimersByTimeAsync(0);
    expect(client.slicesSince).toEqual([null]);

    await jest.advanceTimersByTimeAsync(60 * 1000);
    expect(client.slicesSince).toEqual([null, 2]);

    model.interval = 5000;
    expect(model.interval).toBe(5000);
    await jest.advanceTimersByTimeAsync(60 * 1000); // the tick already scheduled
    await jest.advanceTimersByTimeAsync(5000);
    expect(client.slicesSince).toEqual([null, 2, 3, 4]);
    expect(model.error).toBeNull();
  });
});
