/**
 * Notebooks whose kernel the user shut down from the GPUs panel stay without a kernel.
 *
 * JupyterLab starts a kernel for every notebook it opens without one, a page reload included:
 * a notebook whose sliced kernel was shut down from the panel would quietly take a slice (or a
 * place in line) again. So the panel remembers, in this browser (localStorage, per server and
 * notebook path, for a day), that the user shut it down; when a document widget for that path
 * is created again, its session context is told not to start a kernel (`kernelPreference`'s
 * `shouldStart: false`) before it initializes, and the notebook opens with "No Kernel" until
 * the user picks one. The mark is forgotten as soon as the notebook has a kernel again.
 *
 * The widget factories' `widgetCreated` signal is the hook: the document manager creates the
 * widget synchronously and initializes its context (which starts the kernel) only later.
 * `INotebookTracker.widgetAdded` would be too late to rely on: the tracker emits it after it
 * has saved the widget's restore data, asynchronously.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { ISignal } from '@lumino/signaling';

/** How long a mark holds (ms): it is about reloads, not about next week's work. */
export const MARK_LIFETIME_MS = 24 * 60 * 60 * 1000;

/** At most this many marks are kept (the oldest go first). */
const MAX_MARKS = 100;

/** What is stored: notebook path -> when its kernel was shut down (ms since the epoch). */
type Marks = { [path: string]: number };

/** The part of a session context this needs. */
export interface IHeldContext {
  readonly path: string;
  kernelPreference: ISessionContext.IKernelPreference;
  readonly kernelChanged: ISignal<any, { newValue: unknown }>;
}

/** The part of JupyterLab's document registry this needs. */
export interface IWidgetFactories {
  widgetFactories(): Iterable<{
    readonly name: string;
    readonly widgetCreated: ISignal<any, unknown>;
  }>;
  getWidgetFactory(name: string):
    | {
        readonly name: string;
        readonly widgetCreated: ISignal<any, unknown>;
      }
    | undefined;
  readonly changed: ISignal<
    any,
    { type: string; name?: string; change: string }
  >;
}

export class ShutDownNotebooks {
  constructor(options: ShutDownNotebooks.IOptions) {
    this._storage = options.storage;
    this._key = options.key;
    this._now = options.now ?? (() => Date.now());
    this._onHeldBack = options.onHeldBack ?? null;
  }

  /** The user shut this notebook's kernel down: do not start one for it on its own. */
  mark(path: string | null | undefined): void {
    if (!path) {
      return;
    }
    const marks = this._read();
    marks[path] = this._now();
    this._write(marks);
  }

  /** Forget the mark (the notebook has a kernel again, or the shutdown failed). */
  forget(path: string | null | undefined): void {
    if (!path) {
      return;
    }
    const marks = this._read();
    if (path in marks) {
      delete marks[path];
      this._write(marks);
    }
  }

  /** Whether this notebook's kernel was shut down from the panel (within the last day). */
  has(path: string | null | undefined): boolean {
    return !!path && path in this._read();
  }

  /**
   * Follow a session context from its creation: keep it from starting a kernel while its
   * notebook is marked, and forget the mark once it has a kernel. Returns whether it was held.
   */
  hold(context: IHeldContext): boolean {
    const path = context.path;
    const preference = context.kernelPreference;
    const wasHeld = this.has(path);
    let held = wasHeld;
    if (held) {
      context.kernelPreference = {
        ...preference,
        shouldStart: false,
        autoStartDefault: false
      };
    }
    context.kernelChanged.connect((_, change) => {
      if (!change.newValue) {
        return;
      }
      this.forget(context.path);
      if (held) {
        // Back to what JupyterLab had asked for (the name and language it set since stay).
        held = false;
        context.kernelPreference = {
          ...context.kernelPreference,
          shouldStart: preference.shouldStart,
          autoStartDefault: preference.autoStartDefault
        };
      }
    });
    if (wasHeld) {
      this._onHeldBack?.(path);
    }
    return wasHeld;
  }

  /** Hold every document widget with a session context as its factory creates it. */
  follow(registry: IWidgetFactories): void {
    const connected = new Set<unknown>();
    const connect = (
      factory:
        | {
            readonly name: string;
            readonly widgetCreated: ISignal<any, unknown>;
          }
        | undefined
    ) => {
      if (!factory || connected.has(factory)) {
        return;
      }
      connected.add(factory);
      factory.widgetCreated.connect((_, widget) => {
        const context = sessionContextOf(widget);
        if (context) {
          this.hold(context);
        }
      });
    };
    for (const factory of registry.widgetFactories()) {
      connect(factory);
    }
    registry.changed.connect((_, change) => {
      if (
        change.type === 'widgetFactory' &&
        change.change === 'added' &&
        change.name
      ) {
        connect(registry.getWidgetFactory(change.name));
      }
    });
  }

  /** The live marks (expired ones dropped). */
  private _read(): Marks {
    let marks: Marks = {};
    try {
      const text = this._storage?.getItem(this._key);
      const parsed = text ? JSON.parse(text) : {};
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
        marks = parsed;
      }
    } catch {
      marks = {};
    }
    const oldest = this._now() - MARK_LIFETIME_MS;
    const live: Marks = {};
    for (const [path, t] of Object.entries(marks)) {
      if (typeof t === 'number' && t >= oldest) {
        live[path] = t;
      }
    }
    return live;
  }

  private _write(marks: Marks): void {
    const kept = Object.entries(marks)
      .sort((a, b) => b[1] - a[1])
      .slice(0, MAX_MARKS);
    try {
      if (kept.length) {
        this._storage?.setItem(
          this._key,
          JSON.stringify(Object.fromEntries(kept))
        );
      } else {
        this._storage?.removeItem(this._key);
      }
    } catch {
      // storage full or refused: the notebook may start its kernel on a reload, as before
    }
  }

  private _key: string;
  private _now: () => number;
  private _onHeldBack: ((path: string) => void) | null;
  private _storage: Pick<Storage, 'getItem' | 'setItem' | 'removeItem'> | null;
}

/** A document widget's session context, if it has one (notebooks do). */
function sessionContextOf(widget: unknown): IHeldContext | null {
  const context = (widget as { sessionContext?: IHeldContext } | null)
    ?.sessionContext;
  return context &&
    typeof context.path === 'string' &&
    typeof context.kernelChanged?.connect === 'function'
    ? context
    : null;
}

export namespace ShutDownNotebooks {
  export interface IOptions {
    /** Where the marks live: `window.localStorage` (null: nothing is remembered). */
    storage: Pick<Storage, 'getItem' | 'setItem' | 'removeItem'> | null;
    /** The storage key: one per server (its base URL). */
    key: string;
    /** Now, in ms since the epoch (tests pass their own clock). */
    now?: () => number;
    /** Called when a notebook opens without its kernel because of a mark. */
    onHeldBack?: (path: string) => void;
  }
}
