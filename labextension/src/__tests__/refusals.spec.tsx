/**
 * A refused kernel start, from JupyterLab's session services to the dialog: the error the
 * services reject with names the refusal, which is read by its id and laid out in the dialogs
 * JupyterLab makes for that start (no page watched, no text read).
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { ServerConnection, Session } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';
import * as React from 'react';

import { IRefusal } from '../store/api';
import {
  IRefusedStart,
  RefusedStarts,
  refusalIdOf
} from '../dialogs/kernelstarts';
import { RefusalView, StoppedWaitingView } from '../dialogs/refusal';
import { render } from './render';
import { IStartDialog, RefusalDialogs } from '../dialogs/refusaldialog';

// Widget packages need a DOM; the dialogs here are fakes.
jest.mock('@jupyterlab/ui-components', () => ({ ReactWidget: class {} }));
jest.mock('@lumino/widgets', () => ({
  Panel: class {},
  PanelLayout: class {},
  Widget: class {}
}));

const ID = '0123456789abcdef01234567';

/** The error JupyterLab's services reject a refused start with (its body already read). */
function refusedError(id: string | null = ID): Error {
  const headers: Record<string, string> = id
    ? { 'X-Jupyter-VGPU-Refusal': id }
    : {};
  const response = new Response(null, { status: 503, headers });
  return new ServerConnection.ResponseError(response, 'No room for 1 GPU.');
}

describe('RefusedStarts', () => {
  /** A session manager whose starts and kernel changes fail with `error`. */
  function manager(error: unknown) {
    const session = {
      path: 'work/running.ipynb',
      changeKernel: jest.fn(() => Promise.reject(error))
    };
    const sessions = {
      startNew: jest.fn(() => Promise.reject(error)),
      connectTo: jest.fn(() => session)
    };
    return { sessions, session };
  }

  function follow(sessions: unknown): {
    starts: RefusedStarts;
    seen: IRefusedStart[];
  } {
    const starts = new RefusedStarts(sessions as Session.IManager);
    const seen: IRefusedStart[] = [];
    starts.refused.connect((_, start) => seen.push(start));
    return { starts, seen };
  }

  it("tells of a notebook's refused start, with its refusal, and fails as before", async () => {
    const error = refusedError();
    const { sessions } = manager(error);
    const original = sessions.startNew;
    const { seen } = follow(sessions);

    const started = (sessions as unknown as Session.IManager).startNew({
      path: 'work/4f0c-uuid',
      name: 'big.ipynb',
      type: 'notebook',
      kernel: { name: 'python3-vgpu-1' }
    });

    await expect(started).rejects.toBe(error);
    expect(original).toHaveBeenCalledTimes(1);
    expect(seen).toEqual([{ refusalId: ID, path: 'work/big.ipynb' }]);
  });

  it('and of a refused kernel change of a session', async () => {
    const error = refusedError();
    const { sessions, session } = manager(error);
    const { seen } = follow(sessions);

    const connected = (sessions as unknown as Session.IManager).connectTo({
      model: {} as Session.IModel
    });
    await expect(connected.changeKernel({ name: 'big' })).rejects.toBe(error);

    expect(connected).toBe(session);
    expect(seen).toEqual([{ refusalId: ID, path: 'work/running.ipynb' }]);
  });

  it('says nothing of starts that failed otherwise', async () => {
    for (const error of [
      refusedError(null),
      refusedError('not an id'),
      new TypeError('Failed to fetch')
    ]) {
      const { sessions } = manager(error);
      const { seen } = follow(sessions);
      await expect(
        (sessions as unknown as Session.IManager).startNew({
          path: 'x',
          name: 'x',
          type: 'notebook'
        })
      ).rejects.toBe(error);
      expect(seen).toEqual([]);
    }
    expect(refusalIdOf(null)).toBeNull();
  });

  it('puts the services back when disposed', () => {
    const { sessions } = manager(refusedError());
    const { startNew, connectTo } = sessions;
    const { starts } = follow(sessions);
    expect(sessions.startNew).not.toBe(startNew);
    starts.dispose();
    expect(sessions.startNew).toBe(startNew);
    expect(sessions.connectTo).toBe(connectTo);
  });
});

/** A dialog of JupyterLab's, as the refusal dialogs see it. */
class FakeDialog implements IStartDialog {
  constructor(readonly asksForValue = false) {}
  isDisposed = false;
  classes = new Set<string>();
  mounted: React.ReactElement | null = null;
  closed = false;
  dismissed = false;

  addClass(name: string): void {
    this.classes.add(name);
  }
  removeClass(name: string): void {
    this.classes.delete(name);
  }
  mount(view: React.ReactElement): void {
    this.mounted = view;
  }
  close(): void {
    this.closed = true;
    this.isDisposed = true;
  }
  dismiss(): void {
    this.dismissed = true;
    this.isDisposed = true;
  }
}

function refusal(fields: Partial<IRefusal> = {}): IRefusal {
  return {
    id: ID,
    t: 1700000000,
    kernel_id: null,
    kernel_name: 'python3-vgpu-1',
    kernel_display_name: 'Python 3 (1 GPU)',
    path: 'work/big.ipynb',
    status: 503,
    reason: 'full',
    message: 'No room for 1 GPU (16.0 GiB) now: every GPU is full.',
    summary: 'No room for 1 GPU (16.0 GiB) now: every GPU is full.',
    asked: '1 GPU',
    fits_now: null,
    gpus: [],
    advice: [],
    suggested_kernels: [
      { name: 'python3-vgpu', display_name: 'Python 3 (1/4 GPU)' }
    ],
    ...fields
  };
}

describe('RefusalDialogs', () => {
  let refused: Signal<object, IRefusedStart>;
  let added: Signal<object, unknown>;
  let asked: string[];
  let answer: IRefusal | null;
  let cancelled: boolean;
  let context: { changeKernel: jest.Mock };
  let dialogs: RefusalDialogs;

  beforeEach(() => {
    jest.useFakeTimers();
    const sender = {};
    refused = new Signal(sender);
    added = new Signal(sender);
    asked = [];
    answer = refusal();
    cancelled = false;
    context = { changeKernel: jest.fn(() => Promise.resolve(null)) };
    dialogs = new RefusalDialogs({
      client: {
        refusal: id => {
          asked.push(id);
          return Promise.resolve(answer);
        }
      },
      refused,
      dialogAdded: added,
      wrap: dialog => dialog as FakeDialog,
      currentPath: () => null,
      contextFor: path =>
        path === 'work/big.ipynb'
          ? (context as unknown as ISessionContext)
          : null,
      wasCancelled: () => cancelled,
      waitingKernel: () => null
    });
    dialogs.start();
  });

  afterEach(() => {
    dialogs.dispose();
    jest.useRealTimers();
  });

  /** A refused start, and the dialogs JupyterLab makes for it in the same turn. */
  async function refuse(...made: FakeDialog[]): Promise<void> {
    refused.emit({ refusalId: ID, path: 'work/big.ipynb' });
    made.forEach(dialog => added.emit(dialog));
    await jest.runAllTimersAsync();
  }

  it("lays out the refusal its start named in JupyterLab's error dialog", async () => {
    const error = new FakeDialog();
    await refuse(error);

    expect(asked).toEqual([ID]);
    expect(error.mounted?.type).toBe(RefusalView);
    expect(error.mounted?.props.refusal).toEqual(answer);
    expect(error.classes.size).toBe(0); // shown again once laid out
    expect(error.closed).toBe(false);
  });

  it('starts a kernel that fits from it, past the kernel picker queued behind it', async () => {
    const error = new FakeDialog();
    const picker = new FakeDialog(true);
    await refuse(error, picker);

    error.mounted?.props.onStart('python3-vgpu');
    await jest.runAllTimersAsync();

    expect(error.closed).toBe(true);
    expect(picker.dismissed).toBe(true);
    expect(context.changeKernel).toHaveBeenCalledWith({ name: 'python3-vgpu' });
  });

  it('closes both when this browser cancelled the wait, and notes it otherwise', async () => {
    answer = refusal({ reason: 'cancelled', message: 'Stopped waiting...' });
    cancelled = true;
    const error = new FakeDialog();
    const picker = new FakeDialog(true);
    refused.emit({ refusalId: ID, path: 'work/big.ipynb' });
    added.emit(error);
    added.emit(picker);
    expect(error.classes.has('jp-vgpu-mod-closing')).toBe(true); // never seen
    await jest.runAllTimersAsync();
    expect(error.closed && picker.dismissed).toBe(true);
    expect(error.mounted).toBeNull();

    cancelled = false; // cancelled elsewhere: a note in the dialog
    const other = new FakeDialog();
    await refuse(other);
    expect(other.closed).toBe(false);
    expect(other.mounted?.type).toBe(StoppedWaitingView);
  });

  it('leaves alone dialogs of later turns, and those of a refusal the server no longer has', async () => {
    refused.emit({ refusalId: ID, path: 'work/big.ipynb' });
    await jest.runAllTimersAsync();
    const later = new FakeDialog();
    added.emit(later);
    await jest.runAllTimersAsync();
    expect(later.classes.size).toBe(0);
    expect(later.mounted).toBeNull();
    expect(asked).toEqual([]); // no dialog of JupyterLab's answered it: nothing to lay out

    answer = null;
    const error = new FakeDialog();
    await refuse(error);
    expect(asked).toEqual([ID]);
    expect(error.mounted).toBeNull();
    expect(error.classes.size).toBe(0);
  });
});

describe('RefusalView', () => {
  it("shows the server's code spans as code, without their backticks", () => {
    const html = render(
      <RefusalView
        refusal={refusal({
          summary: 'No room for 1 GPU (16.0 GiB) now: every GPU is full.',
          fits_now: { memory: 4 << 30, text: '`-p 0.25` (4.0 GiB)' },
          advice: [
            'Wait in line: a kernel with wait_timeout, or `jupyter vgpu run --wait SECONDS`; requests are served first come, first served.',
            'Ask for 1 GPU (`-n 1`, or `gpus: 1` in a kernelspec): 1/2 GPU on each fits now.'
          ]
        })}
        onStart={() => undefined}
      />
    );
    const shown = html.replace(/<pre>[\s\S]*<\/pre>/, ''); // the raw message stays raw
    expect(shown).not.toContain('`');
    expect(shown).toContain('<code>jupyter vgpu run --wait SECONDS</code>');
    expect(shown).toContain(
      'Ask for 1 GPU (<code>-n 1</code>, or <code>gpus: 1</code> in a kernelspec)'
    );
    expect(shown).toContain('The most that fits now: <code>-p 0.25</code>');
  });
});
