/**
 * A kernel's name after `%vgpu resize`. Its kernelspec's display name says the size it started
 * with ("Python 3 (1/4 GPU)"); after a resize the slice is another size, and the sidebar's row
 * and the notebook's toolbar say the slice's ("Python 3 (1/2 GPU)").
 *
 * The toolbar's kernel name is JupyterLab's (`sessionContext.kernelDisplayName`, read again
 * whenever the kernel changes): for a notebook whose kernel holds a resized slice, that getter
 * is wrapped on the notebook's own session context, and the label on screen is set at once.
 * The status bar's kernel item ("Python 3 (1/4 GPU) | Idle") reads the same getter, but only
 * when a notebook becomes current or its kernel changes; when a name changes it is made to read
 * the current notebook's again.
 */
import { IKernelStatusModel, ISessionContext } from '@jupyterlab/apputils';
import { KernelSpec } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { ISlice } from './api';
import { parseBytes, parseFraction, sliceConfig } from './kernelspecs';
import { GPUModel } from './model';
import { sessionContextOf } from './sessions';

/**
 * A GPU share as display names write it: "1/4 GPU", "2 x 1/2 GPU", "2 GPUs", "25% GPU", or an
 * amount ("6 GiB", "6.0 GiB", "8GB", "1 GiB GPU"). The first one in a name is the kernelspec's size.
 */
const SHARE =
  /(?:\d+\s*x\s*)?(?:\d+(?:\.\d+)?\s*\/\s*\d+(?:\.\d+)?|\d+(?:\.\d+)?\s*%?)\s*GPUs?\b|\d+(?:\.\d+)?\s*[KMGT]i?B\b(?:\s+GPUs?\b)?/;

/**
 * The size in a name with the limit an elastic kernelspec adds: "1 GiB GPU, up to 3.0 GiB",
 * "1/4 GPU, up to 1/2" (a limit is a share, a percentage, an amount or "1 GPU"). A resized slice's
 * name says its request and limit now, in place of both.
 */
const SHARE_AND_LIMIT = new RegExp(
  `(?:${SHARE.source})(?:,\\s*up to\\s+(?:\\d+(?:\\.\\d+)?\\s*(?:\\/\\s*\\d+(?:\\.\\d+)?|%|[KMGT]i?B\\b|GPUs?\\b)?))?`
);

/** Whether two limits differ: both absent (null) is the same; a share by 1e-6, bytes by 1%. */
function limitDiffers(
  asked: number | null | undefined,
  config: number | null,
  relative: boolean
): boolean {
  const a = asked ?? null;
  if (a === null || config === null) {
    return a !== config;
  }
  return Math.abs(a - config) > (relative ? 0.01 * config : 1e-6);
}

/** Whether `slice` is no longer the size its kernelspec asks for (it was resized); null: unknown. */
export function isResized(
  slice: ISlice,
  spec: KernelSpec.ISpecModel | undefined
): boolean | null {
  const config = sliceConfig(spec);
  if (!config) {
    return null;
  }
  // What the slice asks for now; a slice asked as an amount has a fraction too (amount / GPU),
  // so the request says which kind it is. Older servers send no request.
  const asked = slice.request;
  if (
    asked &&
    (limitDiffers(
      asked.limit_fraction,
      parseFraction(config.gpu_fraction_limit),
      false
    ) ||
      limitDiffers(
        asked.limit_memory,
        parseBytes(config.gpu_memory_limit),
        true
      ))
  ) {
    return true; // its limit changed (or was added, or taken away)
  }
  const fraction = parseFraction(config.gpu_fraction);
  if (fraction !== null) {
    if (asked && asked.memory !== null) {
      return true; // resized to an amount
    }
    const now = asked?.fraction ?? slice.fraction;
    return now === null || Math.abs(Math.min(1, fraction) - now) > 1e-6;
  }
  const bytes = parseBytes(config.gpu_memory);
  if (bytes !== null) {
    const amount = asked
      ? asked.memory
      : slice.fraction === null
        ? slice.memory_reserved
        : null;
    return amount === null || Math.abs(bytes - amount) > 0.01 * bytes;
  }
  return slice.fraction === null || slice.fraction < 1; // a whole GPU, asked
}

/**
 * The name to show for a kernel holding `slice`: `displayName` (its kernelspec's), its size
 * replaced by the slice's when it was resized ("Python 3 (1/4 GPU)" -> "Python 3 (1/2 GPU)"),
 * or the slice's size added when the name says none. `resized` says whether it differs.
 */
export function sliceKernelName(
  displayName: string,
  slice: ISlice,
  spec: KernelSpec.ISpecModel | undefined
): { name: string; resized: boolean } {
  const now = slice.request_text;
  const resized = isResized(slice, spec) ?? !displayName.includes(now);
  if (!resized || !now) {
    return { name: displayName, resized: false };
  }
  // "1 GiB GPU" resized to 2 GiB reads "2.0 GiB GPU"; to a fraction, "1/2 GPU"
  // "1 GiB GPU, up to 3.0 GiB" resized with --limit none reads "1 GiB GPU"; with --limit 1/2,
  // "1/4 GPU, up to 1/2": the request and the limit are replaced together.
  const name = SHARE.test(displayName)
    ? displayName.replace(SHARE_AND_LIMIT, found => {
        const share = found.split(/,\s*up to\s/)[0];
        if (/[KMGT]i?B\s+GPUs?$/.test(share) && !/GPU/.test(now)) {
          const [size, ...limit] = now.split(', up to ');
          return [`${size} GPU`, ...limit].join(', up to ');
        }
        return now;
      })
    : `${displayName} (${now})`;
  return { name, resized: true };
}

/** The getter JupyterLab's session contexts read the kernel's name from. */
function originalGetter(context: ISessionContext): (() => string) | null {
  for (
    let o = Object.getPrototypeOf(context);
    o;
    o = Object.getPrototypeOf(o)
  ) {
    const found = Object.getOwnPropertyDescriptor(o, 'kernelDisplayName');
    if (found?.get) {
      return found.get;
    }
  }
  return null;
}

/**
 * Keeps the notebook toolbar's kernel name true to the slice: follows the store and the main
 * area's notebooks, wrapping the kernel name of those whose kernel holds a resized slice.
 */
export class ResizedKernelNames {
  constructor(options: ResizedKernelNames.IOptions) {
    this._model = options.model;
    this._kernelspecs = options.kernelspecs;
    this._widgets = options.widgets;
    this._kernelStatus = options.kernelStatus ?? null;
    this._model.changed.connect(this.update, this);
  }

  /** The name for a context's kernel: its slice's size when resized, else JupyterLab's. */
  nameFor(context: ISessionContext, original: string): string {
    const kernel = context.session?.kernel;
    const slice = kernel ? this._model.kernelSlice(kernel.id) : null;
    const spec = kernel
      ? this._kernelspecs.specs?.kernelspecs[kernel.name]
      : undefined;
    if (!slice || !spec || original !== spec.display_name) {
      return original; // no slice, or a name that is not the kernelspec's ("No Kernel")
    }
    return sliceKernelName(original, slice, spec).name;
  }

  /** Wrap the kernel names that need it, and show the names on screen now. */
  update(): void {
    let changed = false;
    for (const widget of this._widgets()) {
      const context = sessionContextOf(widget);
      const kernel = context?.session?.kernel;
      const slice = kernel ? this._model.kernelSlice(kernel.id) : null;
      if (!context || (!slice && !this._wrapped.has(context))) {
        continue;
      }
      if (!this._wrapped.has(context)) {
        const original = originalGetter(context);
        if (!original) {
          continue;
        }
        this._wrapped.add(context);
        Object.defineProperty(context, 'kernelDisplayName', {
          configurable: true,
          get: () => this.nameFor(context, original.call(context))
        });
      }
      // The toolbar shows the name it read when the kernel changed: set the text on screen.
      const label = widget.node.querySelector(
        '.jp-Toolbar-kernelName .jp-ToolbarButtonComponent-label'
      );
      const text = label?.firstChild;
      const name = context.kernelDisplayName;
      if (text && text.nodeType === Node.TEXT_NODE && text.nodeValue !== name) {
        text.nodeValue = name; // the same text node React keeps, so its next render goes on
      }
      changed = changed || this._names.get(context) !== name;
      this._names.set(context, name);
    }
    if (changed) {
      this._refreshStatus();
    }
  }

  /**
   * Make the status bar's kernel item read the current notebook's kernel name again. It reads
   * it when it is given a session context, which adding a session provider does (for the current
   * widget); the provider gives none, and being the same function each time it is kept once.
   * Twice: JupyterLab 4's item model announces a new state only when a reading changed nothing
   * (`_triggerChange`), so the second reading shows the first's name.
   */
  private _refreshStatus(): void {
    this._kernelStatus?.addSessionProvider(noSession);
    this._kernelStatus?.addSessionProvider(noSession);
  }

  dispose(): void {
    this._model.changed.disconnect(this.update, this);
  }

  private _kernelspecs: KernelSpec.IManager;
  private _kernelStatus: IKernelStatusModel | null;
  private _model: GPUModel;
  private _names = new WeakMap<ISessionContext, string>();
  private _widgets: () => Iterable<Widget>;
  private _wrapped = new WeakSet<ISessionContext>();
}

/** A session provider for the status bar's kernel item that provides nothing. */
function noSession(): null {
  return null;
}

export namespace ResizedKernelNames {
  export interface IOptions {
    model: GPUModel;
    kernelspecs: KernelSpec.IManager;
    /** The main area's widgets (`app.shell.widgets('main')`). */
    widgets: () => Iterable<Widget>;
    /** JupyterLab's status bar kernel item, where there is one. */
    kernelStatus?: IKernelStatusModel | null;
  }
}
