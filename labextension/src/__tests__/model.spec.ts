/**
 * The model's history and colour bookkeeping, the slices' changes merged into the whole, and
 * its polls against a fake client (a plain object that answers the model's one call with a reply
 * per part asked).
 */
import {
  IDevice,
  IDevicesReply,
  ISampleQuery,
  ISampleReply,
  ISlice,
  ISliceChanges,
  ISlicesChanges,
  ISlicesReply,
  IWatchdogEvent,
  VGPUApiError,
  VGPUClient
} from '../store/api';
import {
  appendHistory,
  GPUModel,
  HISTORY_SECONDS,
  mergeSlices,
  PALETTE_SIZE
} from '../store/model';
import { preferredColour } from '../store/colours';
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

/** A watchdog event, as the slices reply lists them. */
function event(t: number, sliceId = 'a'): IWatchdogEvent {
  return {
    t,
    slice_id: sliceId,
    kernel_id: null,
    action: 'warn',
    ok: true,
    message: `warned at ${t}`
  };
}

/** A `?since=` reply: the slices' changes, the watchdog only when given. */
function changesReply(
  slices: ISliceChanges[],
  takenAt: number,
  watchdog?: ISlicesChanges['watchdog']
): ISlicesChanges {
  return {
    simulated: true,
    interval: 2,
    taken_at: takenAt,
    slices,
    waiting: [],
    ...(watchdog ? { watchdog } : {})
  };
}

describe('mergeSlices', () => {
  const whole: ISlicesReply = {
    simulated: true,
    interval: 2,
    taken_at: 2,
    slices: [
      makeSlice({ id: 'a', memory_used: 1, state: 'ok' }),
      makeSlice({ id: 'b', kernel_id: 'kb', path: 'b.ipynb' })
    ],
    waiting: [],
    watchdog: { action: 'warn', events: [event(1)] }
  };

  it("lays each slice's changed fields over the ones kept", () => {
    const merged = mergeSlices(
      whole,
      changesReply(
        [
          { id: 'a', kernel_id: '0123456789abcdef', memory_used: 5 },
          { id: 'b', kernel_id: 'kb' }
        ],
        3
      )
    );
    expect(merged?.taken_at).toBe(3);
    expect(merged?.slices).toEqual([
      makeSlice({ id: 'a', memory_used: 5, state: 'ok' }),
      makeSlice({ id: 'b', kernel_id: 'kb', path: 'b.ipynb' })
    ]);
    expect(whole.slices[0].memory_used).toBe(1); // the previous reply is left as it was
  });

  it('drops the slices that ended and adds the new ones whole', () => {
    const added = makeSlice({ id: 'c', kernel_id: 'kc' });
    const merged = mergeSlices(
      whole,
      changesReply([{ id: 'b', kernel_id: 'kb' }, added], 3)
    );
    expect(merged?.slices.map(s => s.id)).toEqual(['b', 'c']);
    expect(merged?.slices[1]).toEqual(added);
  });

  it('keeps the watchdog while it is unchanged and takes a changed one', () => {
    const same = mergeSlices(whole, changesReply([], 3));
    expect(same?.watchdog).toEqual({ action: 'warn', events: [event(1)] });
    const watchdog = { action: 'warn', events: [event(1), event(3)] };
    expect(mergeSlices(whole, changesReply([], 3, watchdog))?.watchdog).toEqual(
      watchdog
    );
  });

  it('cannot make a slice it never saw from its changes alone', () => {
    expect(
      mergeSlices(whole, changesReply([{ id: 'z', kernel_id: null }], 3))
    ).toBeNull();
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
    history,
    mig_mode: false,
    tier: 'cooperative',
    slices: []
  };
}

/** Replies the fake server gives, one per part asked, and the `since` each part was asked with. */
class FakeClient {
  devicesReplies: (IDevicesReply | Error)[] = [];
  slicesReplies: (ISlicesChanges | Error)[] = [];
  devicesSince: (number | null | undefined)[] = [];
  slicesSince: (number | null | undefined)[] = [];

  devices(since?: number | null): Promise<IDevicesReply> {
    this.devicesSince.push(since);
    return FakeClient.answer(this.devicesReplies.shift());
  }

  slices(since?: number | null): Promise<ISlicesChanges> {
    this.slicesSince.push(since);
    return FakeClient.answer(this.slicesReplies.shift());
  }

  /** `GET /api/vgpu/sample`: the replies above, as one (the GPUs only when asked). */
  async sample(query: ISampleQuery): Promise<ISampleReply> {
    const [devices, slices] = await Promise.all([
      query.devices !== undefined ? this.devices(query.devices) : undefined,
      this.slices(query.since)
    ]);
    const reply: ISampleReply = devices ? { slices, devices } : { slices };
    if (this.kernelspecs !== undefined) {
      reply.kernelspecs = this.kernelspecs;
    }
    return reply;
  }

  /** The sample's word for the kernelspecs (none: an older server). */
  kernelspecs?: string;

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

  it('holds what a whole reply says after merging the changes of a since reply', async () => {
    const a = makeSlice({ id: 'a', memory_used: 1, history: points(1, 2) });
    const b = makeSlice({ id: 'b', kernel_id: 'kb', history: points(1, 2) });
    const c = makeSlice({ id: 'c', kernel_id: 'kc', history: points(3) });
    client.devicesReplies.push(devicesReply([], 2), devicesReply([], 3));
    client.slicesReplies.push(
      {
        ...slicesReply([a, b], 2),
        watchdog: { action: 'warn', events: [event(1)] }
      },
      changesReply(
        [
          {
            id: 'a',
            kernel_id: a.kernel_id,
            memory_used: 2,
            state: 'near',
            history: points(3)
          },
          c // new since 2: whole
        ],
        3
      )
    );

    await refreshed();
    await refreshed();

    // What GET /api/vgpu/slices without since would have said at 3: b ended, a changed, c new.
    const whole: ISlicesReply = {
      ...slicesReply(
        [
          { ...a, memory_used: 2, state: 'near', history: points(1, 2, 3) },
          { ...c, history: points(3) }
        ],
        3
      ),
      watchdog: { action: 'warn', events: [event(1)] }
    };
    expect(client.slicesSince).toEqual([null, 2]);
    expect(model.snapshot?.slices).toEqual(whole);
    expect(model.sliceHistory('a')).toEqual(points(1, 2, 3));
    expect(model.sliceHistory('b')).toEqual([]);
  });

  it('asks for a whole reply when a since reply names a slice it never saw', async () => {
    const a = makeSlice({ id: 'a', history: points(1) });
    client.devicesReplies.push(
      devicesReply([], 2),
      devicesReply([], 3),
      devicesReply([device('GPU-0', points(3))], 3)
    );
    client.slicesReplies.push(
      slicesReply([a], 2),
      changesReply([{ id: 'z', kernel_id: null, history: points(3) }], 3),
      slicesReply([makeSlice({ id: 'z', history: points(3) })], 3)
    );

    await refreshed();
    await refreshed();

    // The same sample asked again, all of it, with the slices whole.
    expect(client.slicesSince).toEqual([null, 2, null]);
    expect(client.devicesSince).toEqual([null, 2, 2]);
    expect(model.snapshot?.slices.slices.map(s => s.id)).toEqual(['z']);
    expect(model.sliceHistory('z')).toEqual(points(3));
    expect(model.snapshot?.devices.devices.map(d => d.uuid)).toEqual(['GPU-0']);
  });

  it("keeps no slice's host use from a reply before: each reply brings its own", async () => {
    const host = {
      cpu_percent: 5,
      memory_rss: 1,
      memory_total: 2,
      cpu_count: 1
    };
    const a = makeSlice({ id: 'a', kernel_id: 'ka', history: points(1) });
    client.devicesReplies.push(devicesReply([], 2));
    client.slicesReplies.push(
      slicesReply([{ ...a, host }], 2),
      changesReply([{ id: 'a', kernel_id: 'ka', history: points(3) }], 3)
    );

    await refreshed();
    expect(model.slice('a')?.host).toEqual(host);
    visible = false;
    await refreshed();

    expect(client.slicesSince).toEqual([null, 2]);
    expect(model.slice('a')?.host).toBeUndefined();
    expect(model.slice('a')?.kernel_id).toBe('ka');
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

  it('gives each slice the colour its id asks for, the same after a reload', async () => {
    const ids = ['3f2a9c01b7de', '77ab01c2d3e4', 'c0ffee123456'];
    client.devicesReplies.push(devicesReply([], 2));
    client.slicesReplies.push(
      slicesReply(
        ids.map((id, i) => makeSlice({ id, created: 100 + i })),
        2
      )
    );
    await refreshed();
    const colours = ids.map(id => model.colour(id));
    expect(new Set(colours).size).toBe(ids.length); // live slices never share a colour

    // A page loaded later, whose first reply lists the slices in another order.
    const other = new GPUModel({
      client: client as unknown as VGPUClient,
      interval: 60 * 1000
    });
    other.subscribe(() => ({ devices: true }));
    client.devicesReplies.push(devicesReply([], 3));
    client.slicesReplies.push(
      slicesReply(
        [...ids].reverse().map((id, i) => makeSlice({ id, created: 102 - i })),
        3
      )
    );
    const changed = new Promise<void>(resolve =>
      other.changed.connect(() => resolve())
    );
    await other.refresh();
    await jest.advanceTimersByTimeAsync(0);
    await changed;
    expect(ids.map(id => other.colour(id))).toEqual(colours);
    other.dispose();
  });

  it('keeps a colour while its slice lives; a newcomer takes a free one', async () => {
    const a = 'aaaaaaaaaaaa';
    // Another id that asks for the same colour as `a`.
    let b = 'b0';
    for (let i = 1; preferredColour(b) !== preferredColour(a); i++) {
      b = `b${i}`;
    }
    client.devicesReplies.push(devicesReply([], 2));
    client.slicesReplies.push(
      slicesReply([makeSlice({ id: a, created: 1 })], 2)
    );
    await refreshed();
    expect(model.colour(a)).toBe(preferredColour(a));
    client.devicesReplies.push(devicesReply([], 3));
    client.slicesReplies.push(
      slicesReply(
        [makeSlice({ id: a, created: 1 }), makeSlice({ id: b, created: 2 })],
        3
      )
    );
    await refreshed();
    expect(model.colour(a)).toBe(preferredColour(a));
    expect(model.colour(b)).toBe((preferredColour(a) + 1) % PALETTE_SIZE);
  });

  it("keeps the server's word for the kernelspecs, and an older server's silence", async () => {
    client.devicesReplies.push(devicesReply([], 2));
    client.slicesReplies.push(slicesReply([], 2));
    await refreshed();
    expect(model.kernelspecs).toBeNull();
    client.kernelspecs = 'abc';
    client.devicesReplies.push(devicesReply([], 3));
    client.slicesReplies.push(slicesReply([], 3));
    await refreshed();
    expect(model.kernelspecs).toBe('abc');
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
