/**
 * Notebooks whose kernel was shut down (from the GPUs panel, or by the server) stay without a
 * kernel.
 *
 * JupyterLab starts a kernel for every notebook it opens without one, a page reload included:
 * a notebook whose sliced kernel was shut down would quietly take a slice (or a place in line)
 * again. So this browser remembers (localStorage, per server and notebook path, for a day) that
 * the notebook's kernel was shut down, and why: by the user from the panel (`panel`), by the
 * server's idle reclaim, its slice given to someone who waited (`idle`), by the admin's
 * watchdog policy (`shutdown`), or to give its burst back (`burst`, the admin's
 * `burst_reclaim_action` "shutdown"). When a document widget for that path is created again, its
 * session context is told not to start a kernel (`kernelPreference`'s `shouldStart: false`)
 * before it initializes, and the notebook opens with "No Kernel" until the user picks one. The
 * mark is forgotten as soon as the notebook has a kernel again.
 *
 * The widget factories' `widgetCreated` signal is the hook: the document manager creates the
 * widget synchronously and initializes its context (which starts the kernel) only later.
 * `INotebookTracker.widgetAdded` would be too late to rely on: the tracker emits it after it
 * has saved the widget's restore data, asynchronously.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { ISignal } from '@lumino/signaling';

import { pathLabel } from '../format/format';

/** How long a mark holds (ms): it is about reloads, not about next week's work. */
export const MARK_LIFETIME_MS = 24 * 60 * 60 * 1000;

/** At most this many marks are kept (the oldest go first). */
const MAX_MARKS = 100;

/**
 * Why a notebook's kernel was shut down: from the GPUs panel (`panel`), by the server's idle
 * reclaim (`idle`), by the GPU watchdog's policy (`shutdown`), or to give its burst back
 * (`burst`).
 */
export type ShutDownReason = 'panel' | 'idle' | 'shutdown' | 'burst';

const REASONS: ReadonlySet<string> = new Set<ShutDownReason>([
  'panel',
  'idle',
  'shutdown',
  'burst'
]);

/** A live mark: when the kernel was shut down (ms since the epoch), and why. */
interface IMark {
  t: number;
  why: ShutDownReason;
}

/**
 * What is stored, under one key per server: notebook path -> a `panel` mark as the time its
 * kernel was shut down (ms since the epoch: the first format, which every version reads), any
 * other as `{ t, why }`.
 */
type StoredMarks = {
  [path: string]: number | { t: number; why: ShutDownReason };
};

type Marks = { [path: string]: IMark };

/**
 * The notification for a notebook opened without its kernel, one short sentence naming the
 * notebook and why (JupyterLab cuts a notification at 140 characters).
 */
export function heldBackText(path: string, why: ShutDownReason): string {
  const name = pathLabel(path) || path;
  const because =
    why === 'idle'
      ? '; its idle kernel was reclaimed while others waited for the GPU'
      : why === 'shutdown'
        ? "; the GPU watchdog shut its kernel down (the admin's policy)"
        : why === 'burst'
          ? '; its kernel was shut down to give its GPU burst back to others'
          : ', because its kernel was shut down from the GPUs panel';
  return `${name}: no kernel was started${because}. Pick a kernel to start one.`;
}

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

  /**
   * This notebook's kernel was shut down (`why`: by the user from the panel, the default; by
   * idle reclaim; by the watchdog's policy): do not start one for it on its own.
   */
  mark(path: string | null | undefined, why: ShutDownReason = 'panel'): void {
    if (!path) {
      return;
    }
    const marks = this._read();
    marks[path] = { t: this._now(), why: REASONS.has(why) ? why : 'panel' };
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

  /** Whether this notebook's kernel was shut down (within the last day). */
  has(path: string | null | undefined): boolean {
    return !!path && path in this._read();
  }

  /** Why this notebook's kernel was shut down, or null where it is not marked. */
  reason(path: string | null | undefined): ShutDownReason | null {
    return path ? (this._read()[path]?.why ?? null) : null;
  }

  /**
   * Follow a session context from its creation: keep it from starting a kernel while its
   * notebook is marked, and forget the mark once it has a kernel. Returns whether it was held.
   */
  hold(context: IHeldContext): boolean {
    const path = context.path;
    const preference = context.kernelPreference;
    const why = this.reason(path);
    const wasHeld = why !== null;
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
    if (why !== null) {
      this._onHeldBack?.(path, why);
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

  /** The live marks (expired ones, and what cannot be read, dropped). */
  private _read(): Marks {
    let stored: { [path: string]: unknown } = {};
    try {
      const text = this._storage?.getItem(this._key);
      const parsed = text ? JSON.parse(text) : {};
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) {
        stored = parsed;
      }
    } catch {
      stored = {};
    }
    const oldest = this._now() - MARK_LIFETIME_MS;
    const live: Marks = {};
    for (const [path, value] of Object.entries(stored)) {
      const mark = readMark(value);
      if (mark && mark.t >= oldest) {
        live[path] = mark;
      }
    }
    return live;
  }

  private _write(marks: Marks): void {
    const kept = Object.entries(marks)
      .sort((a, b) => b[1].t - a[1].t)
      .slice(0, MAX_MARKS);
    try {
      if (kept.length) {
        const stored: StoredMarks = {};
        for (const [path, { t, why }] of kept) {
          stored[path] = why === 'panel' ? t : { t, why };
        }
        this._storage?.setItem(this._key, JSON.stringify(stored));
      } else {
        this._storage?.removeItem(this._key);
      }
    } catch {
      // storage full or refused: the notebook may start its kernel on a reload, as before
    }
  }

  private _key: string;
  private _now: () => number;
  private _onHeldBack: ((path: string, why: ShutDownReason) => void) | null;
  private _storage: Pick<Storage, 'getItem' | 'setItem' | 'removeItem'> | null;
}

/** A stored mark as a live one: a number is the first format's (`panel`); else null. */
function readMark(value: unknown): IMark | null {
  if (typeof value === 'number') {
    return isFinite(value) ? { t: value, why: 'panel' } : null;
  }
  if (value && typeof value === 'object') {
    const { t, why } = value as { t?: unknown; why?: unknown };
    if (typeof t === 'number' && isFinite(t)) {
      return {
        t,
        why:
          typeof why === 'string' && REASONS.has(why)
            ? (why as ShutDownReason)
            : 'panel'
      };
    }
  }
  return null;
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
    /** Called when a notebook opens without its kernel because of a mark, with its reason. */
    onHeldBack?: (path: string, why: ShutDownReason) => void;
  }
}
