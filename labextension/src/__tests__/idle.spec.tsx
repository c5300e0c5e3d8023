/**
 * Idle reclaim in the UI (issue "Idle slices go back to people who are waiting"): how idle
 * times, notices and countdowns read; the slice row's warning and "Keep it"; the status bar's
 * countdown; the notification per notice (once, dismissed when it goes), the reclaim event (once,
 * in the server's words).
 */
import { showDialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';
import * as React from 'react';

import {
  IIdleNotice,
  ISlice,
  IWatchdogEvent,
  VGPUApiError,
  VGPUClient
} from '../store/api';
import {
  formatClock,
  formatCountdown,
  formatSpan,
  idleNoticeDetails,
  idleNoticeText,
  idleNotificationText,
  idleReason,
  idleText,
  noticeSecondsLeft,
  statusIdleText
} from '../format/format';
import { IdleNotifier, keepSlice } from '../notes/idlenotes';
import { GPUModel } from '../store/model';
import { IHistorySource, ISliceActions, SliceRow } from '../sidebar/slicerow';
import { NoticeCountdown } from '../statusbar/statusitem';
import { eventText, WatchdogNotifier } from '../notes/watchdognotes';
import { makeSlice } from './fixtures';
import { clearNotes, GiB, notes, T0 } from './noticesetup';
import { attr, render, tags, texts } from './render';

jest.mock('@jupyterlab/ui-components', () =>
  jest.requireActual('./mocks').uiComponents()
);
jest.mock('../icons', () => jest.requireActual('./mocks').icons());
jest.mock('@jupyterlab/apputils', () =>
  jest.requireActual('./mocks').apputils()
);

function notice(fields: Partial<IIdleNotice> = {}): IIdleNotice {
  return {
    given: T0,
    deadline: T0 + 300,
    seconds_left: 272,
    for: "1 waiting in line (first: python -c print('GRANTED'), 9/10 GPU)",
    ...fields
  };
}

function idleSlice(fields: Partial<ISlice> = {}): ISlice {
  return makeSlice({
    id: 'abc123',
    path: 'work/idle.ipynb',
    idle_seconds: 2520.4,
    idle_notice: notice(),
    ...fields
  });
}

beforeEach(clearNotes);

describe('formatSpan', () => {
  // [seconds, what jupyter_vgpu.units.format_duration says]
  const server: [number, string][] = [
    [0, '0 s'],
    [0.5, '0 s'],
    [1.5, '1 s'],
    [42, '42 s'],
    [59.6, '59 s'],
    [60, '1 min'],
    [89.5, '1 min 29 s'],
    [91, '1 min 31 s'], // not "2 min": an idle time is never said longer than it was
    [119.9, '1 min 59 s'],
    [150, '2 min 30 s'],
    [599, '9 min 59 s'],
    [600, '10 min'],
    [2520.4, '42 min'],
    [3569, '59 min'],
    [3599.9, '59 min'],
    [3600, '1 h 0 min'],
    [5400, '1 h 30 min'],
    [86400, '24 h 0 min']
  ];
  it.each(server)('reads %p s as the server does: %p', (seconds, text) => {
    expect(formatSpan(seconds)).toBe(text);
  });

  it('says nothing it does not know', () => {
    expect(formatSpan(null)).toBe('–');
    expect(formatSpan(undefined)).toBe('–');
    expect(formatSpan(NaN)).toBe('–');
  });
});

describe('idleText', () => {
  it('says how long a slice has been idle, from a minute on', () => {
    expect(idleText(idleSlice({ idle_seconds: 2520.4 }))).toBe('idle 42 min');
    expect(idleText(idleSlice({ idle_seconds: 60 }))).toBe('idle 1 min');
    expect(idleText(idleSlice({ idle_seconds: 91 }))).toBe('idle 1 min 31 s');
    expect(idleText(idleSlice({ idle_seconds: 7230 }))).toBe('idle 2 h 0 min');
  });

  it('hides under a minute, and where the server does not judge', () => {
    expect(idleText(idleSlice({ idle_seconds: 59.9 }))).toBeNull();
    expect(idleText(idleSlice({ idle_seconds: null }))).toBeNull();
    expect(idleText(makeSlice())).toBeNull(); // an older server
  });
});

describe('formatCountdown', () => {
  it('reads minutes and seconds, rounded up', () => {
    expect(formatCountdown(272)).toBe('4:32');
    expect(formatCountdown(271.2)).toBe('4:32');
    expect(formatCountdown(5)).toBe('0:05');
    expect(formatCountdown(0.2)).toBe('0:01');
    expect(formatCountdown(60)).toBe('1:00');
    expect(formatCountdown(3723)).toBe('1:02:03');
  });

  it('never goes below 0:00', () => {
    expect(formatCountdown(0)).toBe('0:00');
    expect(formatCountdown(-3)).toBe('0:00');
    expect(formatCountdown(null)).toBe('0:00');
  });
});

describe('formatClock', () => {
  it('reads local time, 24 h, two digits each', () => {
    const at = new Date(2024, 0, 2, 9, 5, 7).getTime();
    expect(formatClock(at)).toBe('09:05:07');
    expect(formatClock(new Date(2024, 0, 2, 23, 59, 0).getTime())).toBe(
      '23:59:00'
    );
  });
});

describe('the words of a notice', () => {
  it('counts down from the reply', () => {
    expect(noticeSecondsLeft(notice({ seconds_left: 272 }), 0)).toBe(272);
    expect(noticeSecondsLeft(notice({ seconds_left: 272 }), 12)).toBe(260);
    expect(noticeSecondsLeft(notice({ seconds_left: 3 }), 12)).toBe(0);
    expect(noticeSecondsLeft(notice({ seconds_left: 272 }), -5)).toBe(272);
  });

  it('says who needs the room, without the details the tooltip keeps', () => {
    expect(idleReason(notice())).toBe('to free its GPU for 1 waiting in line');
    expect(
      idleReason(notice({ for: '2 kernel starts refused in the last 10 min' }))
    ).toBe('to free its GPU for 2 kernel starts refused in the last 10 min');
    expect(
      idleReason(notice({ for: "the admin's policy (reclaim always)" }))
    ).toBe("to free its GPU (the admin's policy (reclaim always))");
    expect(idleReason(notice({ for: '' }))).toBe('to free its GPU');
  });

  it('reads as a slice row says it', () => {
    expect(idleNoticeText(notice(), 272)).toBe(
      'Shutting down in 4:32 to free its GPU for 1 waiting in line'
    );
    expect(idleNoticeText(notice(), 0)).toBe(
      'Shutting down now to free its GPU for 1 waiting in line'
    );
  });

  it('reads as the status bar says it', () => {
    expect(statusIdleText(272)).toBe('GPU idle: shutting down in 4:32');
    expect(statusIdleText(0)).toBe('GPU idle: shutting down now');
  });

  it('tells the whole story in the tooltip: why, when, and how to keep it', () => {
    const deadline = new Date(2024, 0, 2, 14, 32, 5).getTime();
    const text = idleNoticeDetails(idleSlice(), notice(), deadline);
    expect(text.split('\n')).toEqual([
      "This kernel has been idle for 42 min (no cell run, no GPU use) while the GPU is needed: 1 waiting in line (first: python -c print('GRANTED'), 9/10 GPU).",
      'The server shuts it down at 14:32:05 to free its 1/4 GPU slice; the notebook is kept.',
      'Running a cell keeps it, and so does "Keep it".'
    ]);
  });

  it('names the notebook in the notification', () => {
    const deadline = new Date(2024, 0, 2, 14, 32, 5).getTime();
    const text = idleNotificationText(idleSlice(), notice(), deadline);
    expect(text).toBe(
      "idle.ipynb's kernel, idle for 42 min, shuts down at 14:32:05 to free its GPU for 1 waiting in line, unless you keep it or run a cell."
    );
    expect(text.length).toBeLessThanOrEqual(140); // JupyterLab cuts a notification there
    expect(
      idleNotificationText(
        idleSlice({ idle_seconds: null }),
        notice(),
        deadline
      )
    ).toMatch(/^idle\.ipynb's kernel, idle, shuts down at 14:32:05 /);
  });
});

/** Plain history: no points. */
const history: IHistorySource = {
  slice: () => [],
  device: () => [],
  now: () => T0
};

function actions(keep = jest.fn()): ISliceActions {
  return {
    openNotebook: jest.fn(),
    kernelDisplayName: s => s.kernel_display_name ?? 'kernel',
    shutdownKernel: jest.fn(),
    releaseSlice: jest.fn(),
    copySliceId: jest.fn(),
    keepSlice: keep
  };
}

describe('SliceRow', () => {
  it('shows the idle time, the countdown and "Keep it" while a notice runs', () => {
    const received = Date.now() - 2000; // the reply came 2 s ago
    const html = render(
      <SliceRow
        slice={idleSlice()}
        colour={0}
        actions={actions()}
        history={history}
        received={received}
      />
    );
    expect(texts(html, 'jp-vgpu-SliceRow-idle')).toEqual(['idle 42 min']);
    const line = tags(html, 'div', 'jp-vgpu-SliceRow-idleNotice');
    expect(line).toHaveLength(1);
    expect(attr(line[0], 'aria-label')).toBe('Idle notice for idle.ipynb');
    expect(attr(line[0], 'title')).toContain('Running a cell keeps it');
    expect(texts(html, 'jp-vgpu-SliceRow-idleText')[0]).toMatch(
      /^Shutting down in 4:(30|29) to free its GPU for 1 waiting in line$/
    );
    const keep = tags(html, 'button', 'jp-vgpu-action-keep');
    expect(keep).toHaveLength(1);
    expect(attr(keep[0], 'aria-label')).toBe('Keep idle.ipynb');
    expect(texts(html, 'jp-vgpu-action-keep')).toEqual(['Keep it']);
    expect(attr(tags(html, 'li', 'jp-vgpu-SliceRow')[0], 'title')).toContain(
      'Idle for 42 min (no cell run'
    );
  });

  it('shows no warning without a notice, and no idle time under a minute', () => {
    const html = render(
      <SliceRow
        slice={idleSlice({ idle_notice: null, idle_seconds: 30 })}
        colour={0}
        actions={actions()}
        history={history}
      />
    );
    expect(tags(html, 'div', 'jp-vgpu-SliceRow-idleNotice')).toEqual([]);
    expect(tags(html, 'span', 'jp-vgpu-SliceRow-idle')).toEqual([]);
  });

  it("offers no Keep it on another user's slice", () => {
    const html = render(
      <SliceRow
        slice={idleSlice({ yours: false })}
        colour={0}
        actions={actions()}
        history={history}
        received={Date.now()}
      />
    );
    expect(tags(html, 'div', 'jp-vgpu-SliceRow-idleNotice')).toHaveLength(1);
    expect(tags(html, 'button', 'jp-vgpu-action-keep')).toEqual([]);
  });
});

describe('the status bar countdown of an idle notice', () => {
  it('counts down and says why in its tooltip', () => {
    const html = render(
      <NoticeCountdown
        slice={idleSlice()}
        received={Date.now()}
        title="GPU 0.0 / 4.0 GiB used of reserved"
        onClick={() => undefined}
      />
    );
    expect(texts(html, 'jp-vgpu-StatusItem-text')[0]).toMatch(
      /^GPU idle: shutting down in 4:3[12]$/
    );
    const button = tags(html, 'button', 'jp-vgpu-StatusItem-content')[0];
    expect(button).toContain('jp-vgpu-mod-idle');
    const title = attr(button, 'title') ?? '';
    expect(title).toContain('This kernel has been idle for 42 min');
    expect(title).toContain('Running a cell keeps it');
    expect(title).toContain('GPU 0.0 / 4.0 GiB used of reserved');
  });
});

/** A GPU as `GET /api/vgpu/devices` describes it. */
/** Just what the notifiers read of a GPUModel. */
class FakeModel {
  changed = new Signal<this, void>(this);
  error: unknown = null;
  snapshot: GPUModel['snapshot'] = null;
  client = { keep: jest.fn(async (id: string) => ({ slice_id: id })) };
  refresh = jest.fn(async () => undefined);
  serverNow = () => T0 + 100;

  show(slices: ISlice[], events: IWatchdogEvent[] = [], taken = Date.now()) {
    this.snapshot = {
      devices: {} as any,
      slices: {
        simulated: true,
        interval: 2,
        taken_at: T0 + 100,
        slices,
        waiting: [],
        watchdog: { action: 'warn', events }
      },
      taken
    };
    this.changed.emit();
  }
}

describe('IdleNotifier', () => {
  function setUp() {
    const model = new FakeModel();
    const keep = jest.fn(async () => undefined);
    const showSidebar = jest.fn();
    const notifier = new IdleNotifier({
      model: model as unknown as GPUModel,
      keep,
      showSidebar
    });
    return { model, keep, showSidebar, notifier };
  }

  it('tells once per notice, naming the notebook, with Keep it', () => {
    const { model, keep } = setUp();
    model.show([idleSlice()]);
    model.show([idleSlice({ idle_notice: notice({ seconds_left: 270 }) })]);
    model.show([idleSlice({ idle_notice: notice({ seconds_left: 268 }) })]);
    expect(notes.warning).toHaveBeenCalledTimes(1);
    const [text, options] = notes.warning.mock.calls[0];
    expect(text).toMatch(/^idle\.ipynb's kernel, idle for 42 min, shuts down/);
    expect(options.autoClose).toBe(false);
    const labels = options.actions.map((a: { label: string }) => a.label);
    expect(labels).toEqual(['Keep it', 'Show GPUs']);
    options.actions[0].callback(new Event('click'));
    expect(keep).toHaveBeenCalledWith(
      expect.objectContaining({ id: 'abc123' })
    );
  });

  it('dismisses the notification once the notice is gone, and tells a new one again', () => {
    const { model } = setUp();
    model.show([idleSlice()]);
    const id = notes.warning.mock.results[0].value;
    model.show([idleSlice({ idle_notice: null })]); // kept, or a cell ran
    expect(notes.dismiss).toHaveBeenCalledWith(id);
    model.show([idleSlice({ idle_notice: notice({ given: T0 + 60 }) })]);
    expect(notes.warning).toHaveBeenCalledTimes(2);
    model.show([]); // reclaimed: the slice is gone
    expect(notes.dismiss).toHaveBeenCalledWith(
      notes.warning.mock.results[1].value
    );
  });

  it("leaves other users' slices and commands alone, and failed refreshes", () => {
    const { model } = setUp();
    model.show([
      idleSlice({ yours: false }),
      idleSlice({ id: 'cmd', holder_kind: 'command', kernel_id: null })
    ]);
    expect(notes.warning).not.toHaveBeenCalled();
    model.show([idleSlice()]);
    model.error = new Error('down');
    model.show([]);
    expect(notes.dismiss).not.toHaveBeenCalled();
  });
});

describe('VGPUClient.keep', () => {
  function client(status: number, body: unknown) {
    const calls: { url: string; method: string; body: string }[] = [];
    const settings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/lab-base/',
      fetch: async (input: RequestInfo, init?: RequestInit) => {
        const request = new Request(input, init);
        calls.push({
          url: request.url,
          method: request.method,
          body: await request.text()
        });
        return new Response(JSON.stringify(body), { status });
      }
    });
    return { client: new VGPUClient(settings), calls };
  }

  it("posts {} to the slice's keep route", async () => {
    const reply = { slice_id: 'abc123', kept: true, notice_cancelled: true };
    const { client: c, calls } = client(200, reply);
    await expect(c.keep('abc123')).resolves.toEqual(reply);
    expect(calls).toHaveLength(1);
    expect(calls[0].url).toMatch(
      /^http:\/\/localhost:8888\/lab-base\/api\/vgpu\/slices\/abc123\/keep(\?\d*)?$/
    );
    expect(calls[0].method).toBe('POST');
    expect(calls[0].body).toBe('{}');
  });

  it("fails with the server's message", async () => {
    const { client: c } = client(403, {
      message: "Slice abc123 is another user's; only its owner can keep it."
    });
    const error = await c.keep('abc123').catch(e => e);
    expect(error).toBeInstanceOf(VGPUApiError);
    expect(error.status).toBe(403);
    expect(error.message).toMatch(/only its owner can keep it/);
  });
});

describe('keepSlice', () => {
  it('asks the server, then refreshes', async () => {
    const model = new FakeModel();
    expect(await keepSlice(model as unknown as GPUModel, idleSlice())).toBe(
      true
    );
    expect(model.client.keep).toHaveBeenCalledWith('abc123');
    expect(model.refresh).toHaveBeenCalled();
  });

  it('says why when the server refuses', async () => {
    const model = new FakeModel();
    model.client.keep.mockRejectedValueOnce(
      new Error("Slice abc123 is another user's; only its owner can keep it.")
    );
    expect(await keepSlice(model as unknown as GPUModel, idleSlice())).toBe(
      false
    );
    expect(notes.error.mock.calls[0][0]).toBe(
      "Could not keep idle.ipynb: Slice abc123 is another user's; only its owner can keep it."
    );
    expect(model.refresh).toHaveBeenCalled();
  });
});

describe('WatchdogNotifier and an idle reclaim', () => {
  const MESSAGE =
    "work/idle.ipynb was idle for 42 min while 1 waiting in line (first: python -c print('GRANTED'), 9/10 GPU): shut down to free its GPU slice abc123 (the admin's idle reclaim; the notebook is kept).";

  function reclaim(fields: Partial<IWatchdogEvent> = {}): IWatchdogEvent {
    return {
      t: T0 + 99, // after the page loaded (the first snapshot is taken at T0 + 100)
      slice_id: 'abc123',
      kernel_id: '0123456789abcdef',
      action: 'idle',
      ok: true,
      message: MESSAGE,
      path: 'work/idle.ipynb',
      memory_used: 0,
      memory_reserved: GiB,
      ...fields
    };
  }

  it("reads in a sentence that fits a notification, from the server's message", () => {
    const text = eventText(reclaim(), undefined);
    expect(text).toBe(
      "idle.ipynb's kernel was shut down after 42 min idle, to free its GPU for 1 waiting in line. The notebook is kept."
    );
    expect(text.length).toBeLessThanOrEqual(140);
    expect(eventText(reclaim({ message: '' }), undefined)).toBe(
      "idle.ipynb's kernel was shut down while idle, to free its GPU for someone who waited. The notebook is kept."
    );
    expect(eventText(reclaim({ ok: false }), undefined)).toBe(
      "idle.ipynb's kernel was idle and someone waited for its GPU, but shutting it down failed."
    );
  });

  it('is told once, as a warning that stays, after the slice has gone', () => {
    jest.spyOn(performance, 'now').mockReturnValue(5000); // the page loaded 5 s before
    const model = new FakeModel();
    const onEvent = jest.fn();
    new WatchdogNotifier({
      model: model as unknown as GPUModel,
      showSidebar: jest.fn(),
      onEvent
    });
    model.show([idleSlice()]);
    model.show([], [reclaim()]);
    model.show([], [reclaim()]);
    expect(notes.warning).toHaveBeenCalledTimes(1);
    expect(onEvent).toHaveBeenCalledTimes(1);
    expect(onEvent).toHaveBeenCalledWith(reclaim());
    expect(notes.error).not.toHaveBeenCalled();
    const [text, options] = notes.warning.mock.calls[0];
    expect(text).toMatch(
      /^idle\.ipynb's kernel was shut down after 42 min idle/
    );
    expect(options.autoClose).toBe(false);
    expect(options.actions.map((a: { label: string }) => a.label)).toEqual([
      'Show GPUs',
      'Details'
    ]);
    options.actions[1].callback(new Event('click'));
    expect(showDialog).toHaveBeenCalledWith(
      expect.objectContaining({ title: 'Idle GPU reclaimed', body: MESSAGE })
    );
  });

  it("is not told for another user's kernel, and a failure is an error", () => {
    jest.spyOn(performance, 'now').mockReturnValue(5000);
    const model = new FakeModel();
    new WatchdogNotifier({
      model: model as unknown as GPUModel,
      showSidebar: jest.fn()
    });
    model.show([idleSlice({ yours: false })]);
    model.show([], [reclaim()]);
    expect(notes.warning).not.toHaveBeenCalled();
    model.show(
      [],
      [reclaim(), reclaim({ slice_id: 'other', ok: false, message: 'failed' })]
    );
    expect(notes.error).toHaveBeenCalledTimes(1);
    expect(notes.error.mock.calls[0][0]).toMatch(
      /but shutting it down failed\.$/
    );
  });
});
