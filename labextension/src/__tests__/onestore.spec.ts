/**
 * One store for the sidebar, the status bar and the GPU dashboard: every tick of its poll is one
 * request to the server, whatever the three show, and each shows what that one reply says.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import { IDevice, ISlice, VGPUClient } from '../store/api';
import { GPUDashboard } from '../dashboard/dashboard';
import { GPUModel } from '../store/model';
import { GPUSidebar } from '../sidebar/sidebar';
import { KernelSliceModel } from '../statusbar/statusitem';
import { makeSlice } from './fixtures';
import { gpu, reply, T0 } from './historyfixtures';

// JupyterLab's widget packages are ES modules that need a DOM; these widgets are never drawn
// here, only built (both show: the panel is open, so is the dashboard).
jest.mock('@jupyterlab/ui-components', () => ({
  ReactWidget: class {
    id = '';
    isVisible = true;
    isDisposed = false;
    title: { [key: string]: unknown } = {};
    addClass(): void {
      // no DOM here
    }
    dispose(): void {
      this.isDisposed = true;
    }
  },
  UseSignal: () => null,
  refreshIcon: { react: () => null }
}));
jest.mock('@jupyterlab/apputils', () => ({
  Clipboard: {},
  Dialog: {},
  MainAreaWidget: class {},
  Notification: {},
  showDialog: jest.fn()
}));
jest.mock('../icons', () => ({ dashboardIcon: {}, gpuIcon: {} }));

const GiB = 1024 ** 3;
/** The poll's interval, and the server's dashboard step: the history is due every tick. */
const TICK_MS = 10 * 1000;

/**
 * A jupyter-vgpu server behind `fetch`: it records each request (route and query) and answers
 * every route the UI has called, with figures that grow by one each tick (`tick`); asked with a
 * `since`, of the slice only what changes (its use, and its host use when asked).
 */
class FakeServer {
  tick = 0;
  requests: string[] = [];
  readonly settings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/lab-base/',
    fetch: (input: RequestInfo, init?: RequestInit) =>
      Promise.resolve(this.answer(new Request(input, init)))
  });

  answer(request: Request): Response {
    const url = new URL(request.url);
    const route = url.pathname.replace('/lab-base/api/vgpu/', '');
    this.requests.push(`${route}${url.search}`);
    const query = url.searchParams;
    const hosts = query.getAll('host');
    const whole = this.slice(hosts.includes('k1'));
    const slices = {
      simulated: true,
      interval: 2,
      taken_at: this.takenAt,
      slices: [
        query.get('since')
          ? {
              id: whole.id,
              kernel_id: whole.kernel_id,
              memory_used: whole.memory_used,
              ...(whole.host ? { host: whole.host } : {}),
              history: []
            }
          : whole
      ],
      waiting: []
    };
    const devices = {
      simulated: true,
      available: true,
      message: null,
      driver: 'simulated',
      interval: 2,
      taken_at: this.takenAt,
      devices: [this.device()]
    };
    const history = reply(this.takenAt, [gpu('GPU-0', 0, [this.takenAt])]);
    const body: { [route: string]: unknown } = {
      sample: {
        slices,
        ...(query.has('devices') ? { devices } : {}),
        ...(query.has('history') ? { history } : {})
      },
      slices,
      devices,
      history,
      'kernels/k1': { kernel_id: 'k1', slice: this.slice(true), host: null }
    };
    return new Response(JSON.stringify(body[route] ?? { message: 'no' }), {
      status: route in body ? 200 : 404
    });
  }

  get takenAt(): number {
    return T0 + 10 * this.tick;
  }

  slice(withHost: boolean): ISlice {
    return makeSlice({
      id: 's1',
      kernel_id: 'k1',
      path: 'work/train.ipynb',
      memory_used: this.tick * GiB,
      ...(withHost
        ? {
            host: {
              cpu_percent: this.tick,
              memory_rss: this.tick * GiB,
              memory_total: 64 * GiB,
              cpu_count: 16
            }
          }
        : {})
    });
  }

  device(): IDevice {
    return {
      index: 0,
      uuid: 'GPU-0',
      name: 'Simulated GPU',
      memory_total: 16 * GiB,
      memory_used: this.tick * GiB,
      memory_reserved: 4 * GiB,
      memory_used_by_slices: this.tick * GiB,
      memory_over_use: 0,
      memory_foreign: 0,
      memory_free: 12 * GiB,
      utilization: 0,
      mig_mode: false,
      tier: 'cooperative',
      slices: ['s1']
    };
  }
}

/** A notebook's session context whose kernel is `kernelId`. */
function sessionContext(kernelId: string): ISessionContext {
  const context = {
    path: 'work/train.ipynb',
    session: { kernel: { id: kernelId } }
  } as unknown as ISessionContext;
  Object.assign(context, {
    kernelChanged: new Signal(context),
    statusChanged: new Signal(context)
  });
  return context;
}

describe('one store for the sidebar, the status bar and the dashboard', () => {
  let server: FakeServer;
  let model: GPUModel;
  let sidebar: GPUSidebar;
  let status: KernelSliceModel;
  let dashboard: GPUDashboard;

  beforeEach(async () => {
    // The clock is the test's too: the history is due a step after the last read.
    jest.useFakeTimers({ doNotFake: ['nextTick', 'queueMicrotask'] });
    server = new FakeServer();
    // As the plugin wires them: one store, handed to the three views.
    model = new GPUModel({
      client: new VGPUClient(server.settings),
      interval: TICK_MS
    });
    sidebar = new GPUSidebar({
      model,
      commands: {} as GPUSidebar.IOptions['commands'],
      serviceManager: {} as GPUSidebar.IOptions['serviceManager'],
      cancelWaiting: () => Promise.resolve()
    });
    dashboard = new GPUDashboard({ model });
    status = new KernelSliceModel(model);
    status.sessionContext = sessionContext('k1');
    model.start();
    await jest.advanceTimersByTimeAsync(0); // the first reads, as the views open
    server.requests = [];
  });

  afterEach(() => {
    status.dispose();
    dashboard.dispose();
    sidebar.dispose();
    model.dispose();
    jest.clearAllTimers();
    jest.useRealTimers();
  });

  it('asks the server once a tick for what all three show', async () => {
    for (const tick of [1, 2, 3]) {
      server.tick = tick;
      await jest.advanceTimersByTimeAsync(TICK_MS);

      expect(server.requests).toHaveLength(1);
      const [only] = server.requests.splice(0);
      expect(only).toMatch(/^sample\?/);
      const asked = new URLSearchParams(only.slice('sample?'.length));
      expect(asked.has('devices')).toBe(true);
      expect(asked.has('history')).toBe(true);
      expect(asked.getAll('host')).toEqual(['k1']);

      // The sidebar, the status bar and the dashboard show this tick's reply.
      expect(sidebar.model.snapshot?.devices.devices[0].memory_used).toBe(
        tick * GiB
      );
      expect(sidebar.model.slice('s1')?.memory_used).toBe(tick * GiB);
      expect(status.slice?.memory_used).toBe(tick * GiB);
      expect(status.host?.cpu_percent).toBe(tick);
      // What the changes leave out is kept from the first, whole, reply.
      expect(sidebar.model.slice('s1')?.path).toBe('work/train.ipynb');
      expect(status.slice?.kernel_display_name).toBe('Python 3 (1/4 GPU)');
      expect(Number(asked.get('since'))).toBe(server.takenAt - 10);
      const points = dashboard.model.store.gpus[0].points;
      expect(points[points.length - 1].t).toBe(server.takenAt);
    }
  });

  it('asks again with the time of the previous reply, and for no view that has closed', async () => {
    server.tick = 1;
    await jest.advanceTimersByTimeAsync(TICK_MS);
    const first = new URLSearchParams(server.requests.splice(0)[0].slice(7));
    dashboard.dispose();
    status.sessionContext = null;
    server.tick = 2;
    await jest.advanceTimersByTimeAsync(TICK_MS);

    expect(server.requests).toHaveLength(1);
    const second = new URLSearchParams(server.requests[0].slice(7));
    expect(Number(second.get('since'))).toBe(Number(first.get('since')) + 10);
    expect(second.has('history')).toBe(false);
    expect(second.getAll('host')).toEqual([]);
    expect(status.slice).toBeNull();
  });
});
