/**
 * A burst asked back in the UI (issue 42, "Giving bursts back"): how the notice reads for each
 * admin's action; the notification per notice (once, with "Show GPUs" and no "Keep it": a burst
 * cannot be kept, its owner frees memory), dismissed when the notice goes; the status bar's
 * countdown, which wins over an idle notice's; the slice row's warning and its bar's burst marked
 * as asked back; the watchdog event once the action ran.
 */
import { showDialog } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';
import * as React from 'react';

import {
  IBurstNotice,
  IIdleNotice,
  ISlice,
  IWatchdogEvent
} from '../store/api';
import {
  burstAskedBack,
  burstDueText,
  burstEventAction,
  burstNoticeDetails,
  burstNoticeText,
  burstNotificationText,
  burstReason,
  statusBurstText
} from '../format/format';
import { BurstNotifier } from '../notes/burstnotes';
import { heldBackText } from '../notes/shutdownmemory';
import { eventText, WatchdogNotifier } from '../notes/watchdognotes';
import { SliceBar } from '../sidebar/bars';
import { WaitingList } from '../sidebar/waiting';
import { IHistorySource, ISliceActions, SliceRow } from '../sidebar/slicerow';
import { NoticeCountdown } from '../statusbar/statusitem';
import { GPUModel } from '../store/model';
import { makeSlice } from './fixtures';
import { clearNotes, GiB, MiB, notes, T0 } from './noticesetup';
import { attr, render, tags, texts } from './render';

jest.mock('@jupyterlab/ui-components', () =>
  jest.requireActual('./mocks').uiComponents()
);
jest.mock('../icons', () => jest.requireActual('./mocks').icons());
jest.mock('@jupyterlab/apputils', () =>
  jest.requireActual('./mocks').apputils()
);

/** The server's `for`: another user's waiting command is never named. */
const FOR = "1 waiting in line (first: another user's command, 2/5 GPU)";

function notice(fields: Partial<IBurstNotice> = {}): IBurstNotice {
  return {
    given: T0,
    deadline: T0 + 60,
    seconds_left: 42,
    for: FOR,
    action: 'restart',
    burst: 2 * GiB,
    ...fields
  };
}

/** A 1/4 GPU slice "up to 1/2" of a 16 GiB GPU using 6.1 GiB: 2.1 GiB above its request. */
function burstSlice(fields: Partial<ISlice> = {}): ISlice {
  return makeSlice({
    id: 'b1',
    path: 'work/burst.ipynb',
    kernel_display_name: 'Python 3 (1/4 GPU, up to 1/2)',
    request: { fraction: 0.25, memory: null, gpus: 1, limit_fraction: 0.5 },
    request_text: '1/4 GPU, up to 1/2',
    memory_reserved: 4 * GiB,
    memory_reserved_total: 4 * GiB,
    context_allowance: 300 * MiB,
    memory_limit: 4 * GiB - 300 * MiB,
    memory_burst_limit: 8 * GiB - 300 * MiB,
    memory_used: 6.1 * GiB,
    memory_burst: 2.1 * GiB,
    burst_notice: notice(),
    ...fields
  });
}

beforeEach(clearNotes);

describe('the words of a burst notice', () => {
  const actions: [string, string, string][] = [
    [
      'restart',
      'Give back 2.1 GiB in 0:42 for 1 waiting in line, or the kernel restarts',
      'GPU burst: restarting in 0:42'
    ],
    [
      'interrupt',
      'Give back 2.1 GiB in 0:42 for 1 waiting in line, or its running cell is interrupted',
      'GPU burst: interrupting in 0:42'
    ],
    [
      'shutdown',
      'Give back 2.1 GiB in 0:42 for 1 waiting in line, or the kernel shuts down',
      'GPU burst: shutting down in 0:42'
    ],
    [
      'warn',
      "Give back 2.1 GiB in 0:42 for 1 waiting in line (the admin's policy only warns)",
      'GPU burst: give back in 0:42'
    ]
  ];

  it.each(actions)(
    'say what %p does, in the row and the status bar',
    (action, row, status) => {
      const n = notice({ action });
      expect(burstNoticeText(burstSlice({ burst_notice: n }), n, 42)).toBe(row);
      expect(statusBurstText(n, 42)).toBe(status);
    }
  );

  it('say "now" once the time is up', () => {
    const n = notice();
    expect(burstNoticeText(burstSlice(), n, 0)).toBe(
      'Give back 2.1 GiB now for 1 waiting in line, or the kernel restarts'
    );
    expect(statusBurstText(n, 0)).toBe('GPU burst: restarting now');
    expect(statusBurstText(notice({ action: 'warn' }), 0)).toBe(
      'GPU burst: give back now'
    );
  });

  it('show an action it does not know as the server sent it', () => {
    const n = notice({ action: 'migrate' });
    expect(burstNoticeText(burstSlice(), n, 42)).toBe(
      'Give back 2.1 GiB in 0:42 for 1 waiting in line, or the server acts (migrate)'
    );
    expect(statusBurstText(n, 42)).toBe('GPU burst: asked back in 0:42');
  });

  it('ask back the burst as it is now, else as it was when the notice was given', () => {
    expect(burstAskedBack(burstSlice(), notice())).toBe(2.1 * GiB);
    expect(burstAskedBack(burstSlice({ memory_burst: null }), notice())).toBe(
      2 * GiB
    );
    expect(burstAskedBack(burstSlice({ memory_burst: 0 }), notice())).toBe(
      2 * GiB
    );
  });

  it('say who needs it, without the details the tooltip keeps', () => {
    expect(burstReason(notice())).toBe('for 1 waiting in line');
    expect(
      burstReason(notice({ for: '3 waiting in line (#2: train.ipynb, 1 GPU)' }))
    ).toBe('for 3 waiting in line');
    expect(
      burstReason(notice({ for: '1 kernel start refused in the last 10 min' }))
    ).toBe('for 1 kernel start refused in the last 10 min');
    expect(burstReason(notice({ for: '' }))).toBe('for someone who needs it');
  });

  it('tell the whole story in the tooltip: how much, for whom, what then, how to end it', () => {
    const deadline = new Date(2024, 0, 2, 14, 32, 5).getTime();
    expect(
      burstNoticeDetails(burstSlice(), notice(), deadline).split('\n')
    ).toEqual([
      `This kernel uses 2.1 GiB above its 4.0 GiB request while the GPU is needed: ${FOR}.`,
      'If it still does at 14:32:05, the server restarts the kernel: it keeps its slice, back at its request, but its variables are lost.',
      'Freeing GPU memory ends the notice: del what you no longer need, then gc.collect(); in PyTorch also torch.cuda.empty_cache().',
      'On a real GPU, TensorFlow and JAX cannot give memory back before a restart (simulated GPUs count what their tensors hold, so del frees it there).'
    ]);
    const warned = burstNoticeDetails(
      burstSlice(),
      notice({ action: 'warn' }),
      deadline
    );
    expect(warned.split('\n')[1]).toBe(
      "At 14:32:05 the server only warns (the admin's policy): the kernel keeps running."
    );
    expect(
      burstNoticeDetails(
        burstSlice(),
        notice({ action: 'shutdown' }),
        deadline
      ).split('\n')[1]
    ).toBe(
      'If it still does at 14:32:05, the server shuts the kernel down; the notebook is kept.'
    );
  });

  it('name the notebook, the amount, the time and what happens in the notification, under 140 characters', () => {
    const deadline = new Date(2024, 0, 2, 14, 32, 5).getTime();
    for (const [action, end] of [
      ['restart', ', or the kernel restarts.'],
      ['interrupt', ', or its running cell is interrupted.'],
      ['shutdown', ', or the kernel shuts down.'],
      ['warn', " (the admin's policy only warns)."]
    ]) {
      const n = notice({ action });
      const text = burstNotificationText(
        burstSlice({ burst_notice: n }),
        n,
        deadline
      );
      expect(text).toBe(
        `burst.ipynb: give back 2.1 GiB of GPU memory by 14:32:05 for 1 waiting in line${end}`
      );
      expect(text.length).toBeLessThanOrEqual(140);
      expect(text).not.toMatch(/keep/i);
    }
    const refused = notice({
      for: '2 kernel starts refused in the last 10 min'
    });
    expect(
      burstNotificationText(
        burstSlice({ burst_notice: refused }),
        refused,
        deadline
      ).length
    ).toBeLessThanOrEqual(140);
  });
});

/** Plain history: no points. */
const history: IHistorySource = {
  slice: () => [],
  device: () => [],
  now: () => T0
};

const actions: ISliceActions = {
  openNotebook: jest.fn(),
  kernelDisplayName: s => s.kernel_display_name ?? 'kernel',
  shutdownKernel: jest.fn(),
  releaseSlice: jest.fn(),
  copySliceId: jest.fn(),
  keepSlice: jest.fn()
};

function row(slice: ISlice, received = Date.now()): string {
  return render(
    <SliceRow
      slice={slice}
      colour={1}
      actions={actions}
      history={history}
      received={received}
    />
  );
}

describe('a slice row while its burst is asked back', () => {
  it('counts down, says how much and what then, with no "Keep it"', () => {
    const html = row(burstSlice(), Date.now() - 2000); // the reply came 2 s ago
    const line = tags(html, 'div', 'jp-vgpu-SliceRow-burstNotice');
    expect(line).toHaveLength(1);
    expect(attr(line[0], 'aria-label')).toBe('Burst notice for burst.ipynb');
    expect(attr(line[0], 'title')).toContain('torch.cuda.empty_cache()');
    expect(attr(line[0], 'title')).toContain(
      'while the GPU is needed: 1 waiting in line (first: another user&#x27;s command, 2/5 GPU).'
    );
    expect(texts(html, 'jp-vgpu-SliceRow-burstText')[0]).toMatch(
      /^Give back 2\.1 GiB in 0:(40|39) for 1 waiting in line, or the kernel restarts$/
    );
    expect(tags(html, 'button', 'jp-vgpu-action-keep')).toEqual([]);
    expect(html).not.toContain('Keep it');
    // Not the idle notice's line: a test (or a reader) looking for one finds none.
    expect(tags(html, 'div', 'jp-vgpu-SliceRow-idleNotice')).toEqual([]);
  });

  it('marks the hatched burst as asked back', () => {
    const html = render(<SliceBar slice={burstSlice()} colour={1} />);
    const bar = tags(html, 'div', 'jp-vgpu-SliceBar')[0];
    expect(bar).toContain('jp-vgpu-mod-bursting');
    expect(bar).toContain('jp-vgpu-mod-givingBack');
    expect(attr(bar, 'aria-valuetext')).toBe(
      '6.1 GiB used of up to 8.0 GiB, 4.0 GiB guaranteed, bursting 2.1 GiB above the request, asked back'
    );
    expect(
      attr(tags(html, 'div', 'jp-vgpu-SliceBar-burst')[0], 'title')
    ).toMatch(/^Burst: 2\.1 GiB above the request, asked back/);
  });

  it('shows neither without a notice', () => {
    const slice = burstSlice({ burst_notice: null });
    const html = row(slice);
    expect(tags(html, 'div', 'jp-vgpu-SliceRow-burstNotice')).toEqual([]);
    const bar = tags(
      render(<SliceBar slice={slice} colour={1} />),
      'div',
      'jp-vgpu-SliceBar'
    )[0];
    expect(bar).toContain('jp-vgpu-mod-bursting');
    expect(bar).not.toContain('jp-vgpu-mod-givingBack');
  });

  it('shows the burst notice above an idle notice when both run', () => {
    const idle: IIdleNotice = {
      given: T0,
      deadline: T0 + 300,
      seconds_left: 272,
      for: FOR
    };
    const html = row(burstSlice({ idle_notice: idle }));
    const burstAt = html.indexOf('jp-vgpu-SliceRow-burstNotice');
    const idleAt = html.indexOf('jp-vgpu-SliceRow-idleNotice');
    expect(burstAt).toBeGreaterThan(0);
    expect(idleAt).toBeGreaterThan(burstAt);
  });
});

describe('the status bar while the burst is asked back', () => {
  it('counts down and says why and how to end it in its tooltip', () => {
    const html = render(
      <NoticeCountdown
        slice={burstSlice()}
        received={Date.now()}
        title="GPU 6.1 GiB of up to 8.0 GiB"
        onClick={() => undefined}
      />
    );
    expect(texts(html, 'jp-vgpu-StatusItem-text')).toEqual([
      'GPU burst: restarting in 0:42'
    ]);
    const button = tags(html, 'button', 'jp-vgpu-StatusItem-content')[0];
    expect(button).toContain('jp-vgpu-mod-burstNotice');
    const title = attr(button, 'title') ?? '';
    expect(title).toContain(
      'This kernel uses 2.1 GiB above its 4.0 GiB request'
    );
    expect(title).toContain('TensorFlow and JAX cannot give memory back');
    expect(title).toContain('GPU 6.1 GiB of up to 8.0 GiB');
  });

  it('wins over an idle notice (bursts are given back first), which shows without one', () => {
    const idle: IIdleNotice = {
      given: T0,
      deadline: T0 + 300,
      seconds_left: 272,
      for: FOR
    };
    const both = render(
      <NoticeCountdown
        slice={burstSlice({ idle_notice: idle })}
        received={Date.now()}
        title=""
        onClick={() => undefined}
      />
    );
    expect(texts(both, 'jp-vgpu-StatusItem-text')).toEqual([
      'GPU burst: restarting in 0:42'
    ]);
    const idleOnly = render(
      <NoticeCountdown
        slice={burstSlice({ idle_notice: idle, burst_notice: null })}
        received={Date.now()}
        title=""
        onClick={() => undefined}
      />
    );
    expect(texts(idleOnly, 'jp-vgpu-StatusItem-text')[0]).toMatch(
      /^GPU idle: shutting down in 4:3[12]$/
    );
  });
});

/** Just what the notifiers read of a GPUModel. */
class FakeModel {
  changed = new Signal<this, void>(this);
  error: unknown = null;
  snapshot: GPUModel['snapshot'] = null;
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

describe('BurstNotifier', () => {
  function setUp() {
    const model = new FakeModel();
    const showSidebar = jest.fn();
    const notifier = new BurstNotifier({
      model: model as unknown as GPUModel,
      showSidebar
    });
    return { model, showSidebar, notifier };
  }

  it('tells once per notice, naming the notebook, with Show GPUs and no Keep it', () => {
    const { model, showSidebar } = setUp();
    model.show([burstSlice()]);
    model.show([burstSlice({ burst_notice: notice({ seconds_left: 40 }) })]);
    model.show([burstSlice({ burst_notice: notice({ seconds_left: 38 }) })]);
    expect(notes.warning).toHaveBeenCalledTimes(1);
    const [text, options] = notes.warning.mock.calls[0];
    expect(text).toMatch(
      /^burst\.ipynb: give back 2\.1 GiB of GPU memory by \d\d:\d\d:\d\d for 1 waiting in line, or the kernel restarts\.$/
    );
    expect(options.autoClose).toBe(false);
    expect(options.actions.map((a: { label: string }) => a.label)).toEqual([
      'Show GPUs'
    ]);
    options.actions[0].callback(new Event('click'));
    expect(showSidebar).toHaveBeenCalled();
  });

  it('dismisses the notification once the notice is gone, and tells a new one again', () => {
    const { model } = setUp();
    model.show([burstSlice()]);
    const id = notes.warning.mock.results[0].value;
    model.show([burstSlice({ burst_notice: null, memory_burst: 0 })]); // given back
    expect(notes.dismiss).toHaveBeenCalledWith(id);
    model.show([burstSlice({ burst_notice: notice({ given: T0 + 90 }) })]);
    expect(notes.warning).toHaveBeenCalledTimes(2);
    model.show([]); // shut down: the slice is gone
    expect(notes.dismiss).toHaveBeenCalledWith(
      notes.warning.mock.results[1].value
    );
  });

  it("leaves other users' slices, idle notices and failed refreshes alone", () => {
    const { model } = setUp();
    model.show([
      burstSlice({ yours: false }),
      burstSlice({
        id: 'idle',
        burst_notice: null,
        idle_notice: { given: T0, deadline: T0 + 9, seconds_left: 9, for: FOR }
      })
    ]);
    expect(notes.warning).not.toHaveBeenCalled();
    model.show([burstSlice()]);
    model.error = new Error('down');
    model.show([]);
    expect(notes.dismiss).not.toHaveBeenCalled();
  });

  it('dismisses what it shows when disposed', () => {
    const { model, notifier } = setUp();
    model.show([burstSlice()]);
    notifier.dispose();
    expect(notes.dismiss).toHaveBeenCalledWith(
      notes.warning.mock.results[0].value
    );
  });
});

describe('WatchdogNotifier and a burst given back', () => {
  const WORDS =
    "work/burst.ipynb still used 2.1 GiB above its 4.0 GiB request 1 min after its notice, while 1 waiting in line (first: another user's command, 2/5 GPU)";

  function given(
    done: string,
    fields: Partial<IWatchdogEvent> = {}
  ): IWatchdogEvent {
    return {
      t: T0 + 99, // after the page loaded (the first snapshot is taken at T0 + 100)
      slice_id: 'b1',
      kernel_id: '0123456789abcdef',
      action: 'burst',
      ok: true,
      message: `${WORDS}: ${done} to give its burst back (the admin's burst reclaim).`,
      path: 'work/burst.ipynb',
      memory_used: 6.1 * GiB,
      memory_reserved: 4 * GiB,
      ...fields
    };
  }

  it('reads what the server did in a sentence that fits a notification', () => {
    const cases: [string, string | null, string][] = [
      [
        'restarted',
        'restart',
        "burst.ipynb's kernel was restarted to give back its 2.1 GiB burst for 1 waiting in line. It keeps its slice, at its request."
      ],
      [
        'interrupted',
        'interrupt',
        "burst.ipynb's running cell was interrupted to give back its 2.1 GiB burst for 1 waiting in line."
      ],
      [
        'shut down',
        'shutdown',
        "burst.ipynb's kernel was shut down to give back its 2.1 GiB burst for 1 waiting in line. The notebook is kept."
      ],
      [
        'warned',
        'warn',
        "burst.ipynb's kernel still uses 2.1 GiB above its request while 1 waiting in line needs it (the admin's policy only warns)."
      ]
    ];
    for (const [done, action, text] of cases) {
      const e = given(done);
      expect(burstEventAction(e)).toBe(action);
      expect(eventText(e, undefined)).toBe(text);
      expect(text.length).toBeLessThanOrEqual(140);
    }
    const failed = given('', {
      ok: false,
      message: `${WORDS}: could not be restarted (no such kernel).`
    });
    expect(burstEventAction(failed)).toBe('restart');
    expect(eventText(failed, undefined)).toBe(
      "burst.ipynb's kernel still burst while 1 waiting in line needed the memory, but restarting it failed."
    );
    expect(eventText(given('', { message: '' }), undefined)).toBe(
      "burst.ipynb's GPU burst was reclaimed for someone who needed it."
    );
  });

  it("is told once, as a warning that stays, with the server's message in Details", () => {
    jest.spyOn(performance, 'now').mockReturnValue(5000); // the page loaded 5 s before
    const model = new FakeModel();
    const onEvent = jest.fn();
    new WatchdogNotifier({
      model: model as unknown as GPUModel,
      showSidebar: jest.fn(),
      onEvent
    });
    const e = given('restarted');
    model.show([burstSlice({ burst_notice: null })], [e]);
    model.show([burstSlice({ burst_notice: null })], [e]);
    expect(notes.warning).toHaveBeenCalledTimes(1);
    expect(onEvent).toHaveBeenCalledWith(e);
    expect(notes.error).not.toHaveBeenCalled();
    const [text, options] = notes.warning.mock.calls[0];
    expect(text).toMatch(/^burst\.ipynb's kernel was restarted to give back/);
    expect(options.autoClose).toBe(false);
    options.actions[1].callback(new Event('click'));
    expect(showDialog).toHaveBeenCalledWith(
      expect.objectContaining({
        title: 'GPU burst given back',
        body: e.message
      })
    );
  });

  it('lets a warning go by itself, and makes a failure an error', () => {
    jest.spyOn(performance, 'now').mockReturnValue(5000);
    const model = new FakeModel();
    new WatchdogNotifier({
      model: model as unknown as GPUModel,
      showSidebar: jest.fn()
    });
    model.show(
      [burstSlice()],
      [
        given('warned'),
        given('', {
          t: T0 + 99.5,
          ok: false,
          message: `${WORDS}: could not be shut down (gone).`
        })
      ]
    );
    expect(notes.warning).toHaveBeenCalledTimes(1);
    expect(notes.warning.mock.calls[0][1].autoClose).toBe(15000);
    expect(notes.error).toHaveBeenCalledTimes(1);
    expect(notes.error.mock.calls[0][0]).toMatch(
      /but shutting it down failed\.$/
    );
  });
});

describe('a notebook whose kernel was shut down to give its burst back', () => {
  it('says why when a reload starts no kernel for it', () => {
    const text = heldBackText('work/burst.ipynb', 'burst');
    expect(text).toBe(
      'burst.ipynb: no kernel was started; its kernel was shut down to give its GPU burst back to others. Pick a kernel to start one.'
    );
    expect(text.length).toBeLessThanOrEqual(140);
  });
});

describe('a place in line that bursts are given back for', () => {
  it('says when the room comes back and what then happens, counting down', () => {
    const due = { deadline: 1000, seconds_left: 42, action: 'restart' };
    expect(burstDueText(due, 0)).toBe(
      'Bursting kernels give the room back: in 0:42, else they restart'
    );
    expect(burstDueText({ ...due, action: 'warn' }, 2)).toBe(
      'Bursting kernels give the room back: in 0:40'
    );
    expect(burstDueText(due, 60)).toBe(
      'Bursting kernels give the room back: now, else they restart'
    );
  });

  it('shows under its row, and not under a row nobody gives anything back for', () => {
    const waiter = {
      ticket: 7,
      position: 1,
      holder_kind: 'command' as const,
      holder: 'python train.py',
      request_text: '3/5 GPU',
      waiting_seconds: 3,
      labels: {},
      burst_due: { deadline: 1000, seconds_left: 30, action: 'restart' }
    };
    const actions = { cancel: () => undefined, openNotebook: () => undefined };
    const html = render(
      <WaitingList waiting={[waiter]} taken={Date.now()} actions={actions} />
    );
    expect(texts(html, 'jp-vgpu-Waiting-burst')).toEqual([
      'Bursting kernels give the room back: in 0:30, else they restart'
    ]);
    const plain = render(
      <WaitingList
        waiting={[{ ...waiter, burst_due: null }]}
        taken={Date.now()}
        actions={actions}
      />
    );
    expect(texts(plain, 'jp-vgpu-Waiting-burst')).toEqual([]);
  });
});
