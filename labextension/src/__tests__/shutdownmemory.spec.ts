/**
 * A notebook whose kernel was shut down from the GPUs panel opens without a kernel after a
 * reload, until it gets one again.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import {
  IHeldContext,
  MARK_LIFETIME_MS,
  ShutDownNotebooks
} from '../shutdownmemory';

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

function memory(now = () => 1_000_000, onHeldBack?: (path: string) => void) {
  const storage = new MemoryStorage();
  const notebooks = new ShutDownNotebooks({
    storage,
    key: 'jupyter-vgpu:shut-down:/base/',
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
    expect(storage.items.has('jupyter-vgpu:shut-down:/base/')).toBe(true);
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
    storage.setItem('jupyter-vgpu:shut-down:/base/', '{not json');
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
    const held: string[] = [];
    const { notebooks } = memory(undefined, path => held.push(path));
    notebooks.mark('work/train.ipynb');
    const context = new FakeContext('work/train.ipynb');
    expect(notebooks.hold(context)).toBe(true);
    expect(context.kernelPreference.shouldStart).toBe(false);
    expect(context.kernelPreference.autoStartDefault).toBe(false);
    expect(context.kernelPreference.name).toBe('python3-vgpu-1-4');
    expect(held).toEqual(['work/train.ipynb']);
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
