/**
 * A notebook whose kernel was shut down (from the GPUs panel, by idle reclaim, by the watchdog's
 * policy) opens without a kernel after a reload, saying why, until it gets one again.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import {
  heldBackText,
  IHeldContext,
  MARK_LIFETIME_MS,
  ShutDownNotebooks,
  ShutDownReason
} from '../notes/shutdownmemory';

const KEY = 'jupyter-vgpu:shut-down:/base/';

class MemoryStorage {
  getItem(key: string): string | null {
    return this.items.has(key) ? this.items.get(key)! : null;
  }
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }
  removeItem(key: string): void {
    this.items.delete(key);
  }
  items = new Map<string, string>();
}

class FakeContext implements IHeldContext {
  constructor(readonly path: string) {}
  kernelPreference: ISessionContext.IKernelPreference = {
    name: 'python3-vgpu-1-4',
    shouldStart: true,
    canStart: true
  };
  kernelChanged = new Signal<this, { newValue: unknown }>(this);
  /** A kernel starts (or the user picks one). */
  giveKernel(): void {
    this.kernelChanged.emit({ newValue: { id: 'k1' } });
  }
}

class FakeFactory {
  constructor(readonly name: string) {}
  widgetCreated = new Signal<this, unknown>(this);
}

function memory(
  now = () => 1_000_000,
  onHeldBack?: (path: string, why: ShutDownReason) => void
) {
  const storage = new MemoryStorage();
  const notebooks = new ShutDownNotebooks({
    storage,
    key: KEY,
    now,
    onHeldBack
  });
  return { storage, notebooks };
}

describe('ShutDownNotebooks', () => {
  it('remembers a notebook per server until it is forgotten', () => {
    const { storage, notebooks } = memory();
    notebooks.mark('work/train.ipynb');
    expect(notebooks.has('work/train.ipynb')).toBe(true);
    expect(notebooks.has('work/other.ipynb')).toBe(false);
    expect(storage.items.has(KEY)).toBe(true);
    notebooks.forget('work/train.ipynb');
    expect(notebooks.has('work/train.ipynb')).toBe(false);
    expect(storage.items.size).toBe(0);
  });

  it('holds for a day only', () => {
    let now = 1_000_000;
    const { notebooks } = memory(() => now);
    notebooks.mark('a.ipynb');
    now += MARK_LIFETIME_MS - 1;
    expect(notebooks.has('a.ipynb')).toBe(true);
    now += 2;
    expect(notebooks.has('a.ipynb')).toBe(false);
  });

  it('reads what it cannot parse as nothing', () => {
    const { storage, notebooks } = memory();
    storage.setItem(KEY, '{not json');
    expect(notebooks.has('a.ipynb')).toBe(false);
    notebooks.mark('a.ipynb');
    expect(notebooks.has('a.ipynb')).toBe(true);
  });

  it('does nothing without a path or a storage', () => {
    const { storage, notebooks } = memory();
    notebooks.mark(null);
    notebooks.mark('');
    expect(storage.items.size).toBe(0);
    const none = new ShutDownNotebooks({ storage: null, key: 'k' });
    none.mark('a.ipynb');
    expect(none.has('a.ipynb')).toBe(false);
  });

  it('keeps a marked notebook from starting a kernel, and says so', () => {
    const held: [string, ShutDownReason][] = [];
    const { notebooks } = memory(undefined, (path, why) =>
      held.push([path, why])
    );
    notebooks.mark('work/train.ipynb');
    const context = new FakeContext('work/train.ipynb');
    expect(notebooks.hold(context)).toBe(true);
    expect(context.kernelPreference.shouldStart).toBe(false);
    expect(context.kernelPreference.autoStartDefault).toBe(false);
    expect(context.kernelPreference.name).toBe('python3-vgpu-1-4');
    expect(held).toEqual([['work/train.ipynb', 'panel']]);
  });

  it('remembers why the kernel was shut down, the panel by default', () => {
    const { storage, notebooks } = memory();
    notebooks.mark('panel.ipynb');
    notebooks.mark('idle.ipynb', 'idle');
    notebooks.mark('policy.ipynb', 'shutdown');
    expect(notebooks.reason('panel.ipynb')).toBe('panel');
    expect(notebooks.reason('idle.ipynb')).toBe('idle');
    expect(notebooks.reason('policy.ipynb')).toBe('shutdown');
    expect(notebooks.reason('other.ipynb')).toBeNull();
    expect(notebooks.reason(null)).toBeNull();
    expect(notebooks.has('idle.ipynb')).toBe(true);
    // A panel mark is stored as before (a number: older versions read it too); the others with
    // their reason.
    expect(JSON.parse(storage.getItem(KEY)!)).toEqual({
      'panel.ipynb': 1_000_000,
      'idle.ipynb': { t: 1_000_000, why: 'idle' },
      'policy.ipynb': { t: 1_000_000, why: 'shutdown' }
    });
    // The latest shutdown is the one told.
    notebooks.mark('idle.ipynb', 'panel');
    expect(notebooks.reason('idle.ipynb')).toBe('panel');
  });

  it('reads a mark of the first format (path -> time) as shut down from the panel', () => {
    let now = 2_000_000;
    const { storage, notebooks } = memory(() => now);
    storage.setItem(
      KEY,
      JSON.stringify({
        'old.ipynb': 1_500_000,
        'new.ipynb': { t: 1_500_000, why: 'idle' },
        'odd.ipynb': { t: 1_500_000, why: 'next year' },
        'bad.ipynb': { why: 'idle' },
        'worse.ipynb': 'yesterday'
      })
    );
    expect(notebooks.reason('old.ipynb')).toBe('panel');
    expect(notebooks.reason('new.ipynb')).toBe('idle');
    expect(notebooks.reason('odd.ipynb')).toBe('panel'); // held all the same
    expect(notebooks.has('bad.ipynb')).toBe(false);
    expect(notebooks.has('worse.ipynb')).toBe(false);
    // The same lifetime for both formats.
    now = 1_500_000 + MARK_LIFETIME_MS + 1;
    expect(notebooks.has('old.ipynb')).toBe(false);
    expect(notebooks.has('new.ipynb')).toBe(false);
  });

  it('keeps at most 100 marks, the newest, whatever their format', () => {
    let now = 1_000_000;
    const { storage, notebooks } = memory(() => now);
    storage.setItem(KEY, JSON.stringify({ 'old.ipynb': now - 1 }));
    for (let i = 0; i < 100; i++) {
      now += 1;
      notebooks.mark(`n${i}.ipynb`, i % 2 ? 'idle' : 'panel');
    }
    const stored = JSON.parse(storage.getItem(KEY)!);
    expect(Object.keys(stored)).toHaveLength(100);
    expect(stored['old.ipynb']).toBeUndefined();
    expect(notebooks.reason('n0.ipynb')).toBe('panel');
    expect(notebooks.reason('n99.ipynb')).toBe('idle');
  });

  it('tells why a notebook was held back', () => {
    const held: [string, ShutDownReason][] = [];
    const { notebooks } = memory(undefined, (path, why) =>
      held.push([path, why])
    );
    notebooks.mark('work/idle.ipynb', 'idle');
    notebooks.mark('work/policy.ipynb', 'shutdown');
    notebooks.mark('work/panel.ipynb');
    for (const path of [
      'work/idle.ipynb',
      'work/policy.ipynb',
      'work/panel.ipynb',
      'work/other.ipynb'
    ]) {
      notebooks.hold(new FakeContext(path));
    }
    expect(held).toEqual([
      ['work/idle.ipynb', 'idle'],
      ['work/policy.ipynb', 'shutdown'],
      ['work/panel.ipynb', 'panel']
    ]);
    // Once it has a kernel again, the reason goes with the mark.
    const idle = new FakeContext('work/idle.ipynb');
    notebooks.hold(idle);
    idle.giveKernel();
    expect(notebooks.reason('work/idle.ipynb')).toBeNull();
  });

  it('says why in one sentence that fits a notification', () => {
    const panel = heldBackText('work/train.ipynb', 'panel');
    const idle = heldBackText('work/train.ipynb', 'idle');
    const policy = heldBackText('work/train.ipynb', 'shutdown');
    expect(panel).toBe(
      'train.ipynb: no kernel was started, because its kernel was shut down from the GPUs panel. Pick a kernel to start one.'
    );
    expect(idle).toBe(
      'train.ipynb: no kernel was started; its idle kernel was reclaimed while others waited for the GPU. Pick a kernel to start one.'
    );
    expect(policy).toBe(
      "train.ipynb: no kernel was started; the GPU watchdog shut its kernel down (the admin's policy). Pick a kernel to start one."
    );
    // JupyterLab cuts a notification at 140 characters: room for a name of 22.
    const path = `work/${'n'.repeat(16)}.ipynb`;
    for (const why of ['panel', 'idle', 'shutdown'] as ShutDownReason[]) {
      expect(heldBackText(path, why)).toMatch(/^n{16}\.ipynb: no kernel/);
      expect(heldBackText(path, why)).toMatch(
        /\. Pick a kernel to start one\.$/
      );
      expect(heldBackText(path, why).length).toBeLessThan(140);
    }
  });

  it('forgets the mark once the notebook has a kernel again', () => {
    const { notebooks } = memory();
    notebooks.mark('work/train.ipynb');
    const context = new FakeContext('work/train.ipynb');
    notebooks.hold(context);
    context.kernelChanged.emit({ newValue: null }); // no kernel: still marked
    expect(notebooks.has('work/train.ipynb')).toBe(true);
    context.giveKernel();
    expect(notebooks.has('work/train.ipynb')).toBe(false);
    expect(context.kernelPreference.shouldStart).toBe(true);
  });

  it('leaves other notebooks alone, and forgets a mark when one gets a kernel', () => {
    const { notebooks } = memory();
    const context = new FakeContext('work/other.ipynb');
    expect(notebooks.hold(context)).toBe(false);
    expect(context.kernelPreference.shouldStart).toBe(true);
    notebooks.mark('work/other.ipynb'); // shut down from the panel while open here
    context.giveKernel(); // the user picked a kernel again in this page
    expect(notebooks.has('work/other.ipynb')).toBe(false);
  });

  it("holds the widgets of every factory, at the factory's widgetCreated", () => {
    const { notebooks } = memory();
    const notebook = new FakeFactory('Notebook');
    const later = new FakeFactory('Later');
    const factories = new Map([[notebook.name, notebook]]);
    const changed = new Signal<
      unknown,
      { type: string; name?: string; change: string }
    >({});
    notebooks.follow({
      widgetFactories: () => factories.values(),
      getWidgetFactory: name =>
        (factories as Map<string, FakeFactory>).get(name),
      changed
    });
    notebooks.mark('a.ipynb');
    notebooks.mark('b.ipynb');

    const a = new FakeContext('a.ipynb');
    notebook.widgetCreated.emit({ sessionContext: a });
    expect(a.kernelPreference.shouldStart).toBe(false);

    (factories as Map<string, FakeFactory>).set(later.name, later);
    changed.emit({ type: 'widgetFactory', name: 'Later', change: 'added' });
    const b = new FakeContext('b.ipynb');
    later.widgetCreated.emit({ sessionContext: b });
    expect(b.kernelPreference.shouldStart).toBe(false);

    notebook.widgetCreated.emit({ title: 'no session context' }); // an editor, say
  });
});
