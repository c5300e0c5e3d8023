/**
 * JupyterLab's own "Error Starting Kernel" dialog, made readable for refused GPU slices.
 *
 * JupyterLab shows the server's message in one <pre> (the stylesheet makes it wrap). When such
 * a dialog opens and the server recorded a matching refusal (`GET /api/vgpu/refusals`: the
 * same text, or the same notebook within the last half minute), its body is replaced by a
 * formatted view with "Start <a kernel that fits>" buttons. A start that stopped waiting in line
 * because this browser cancelled it closes the dialog (a notification said so already);
 * otherwise it gets a short note. Anything else, or any failure here, leaves the dialog as it is.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { IRefusal, VGPUClient } from './api';
import { RefusalView, StoppedWaitingView } from './refusal';

/** JupyterLab's title for a kernel that fails to start (English; other languages are matched by the message). */
const KERNEL_ERROR_TITLE = /Error Starting Kernel/i;

/** The server's message after a request left the line before it got a slice. */
const STOPPED_WAITING = /^\s*Stopped waiting/;

/** How recent a refusal must be to be the one of the notebook the dialog is about (s). */
const SAME_NOTEBOOK_WINDOW_S = 30;

/** How long to wait for the dialog's React content to render (ms). */
const RENDER_TIMEOUT_MS = 3000;

/** How long the original body stays hidden while the refusal is looked up (ms). */
const LOOKUP_TIMEOUT_MS = 2500;

/**
 * How long after the error dialog closes JupyterLab may open its "Select Kernel" dialog (it
 * does when the notebook's first kernel failed to start; the dialogs queue) (ms).
 */
const FOLLOW_UP_MS = 800;

/** Resolve with `check()`'s first truthy value as `node`'s subtree changes, or null after `ms`. */
function whenReady<T>(
  node: Node,
  check: () => T | null,
  ms: number
): Promise<T | null> {
  const now = check();
  if (now) {
    return Promise.resolve(now);
  }
  return new Promise(resolve => {
    const observer = new MutationObserver(() => {
      const value = check();
      if (value) {
        finish(value);
      }
    });
    const timer = window.setTimeout(() => finish(null), ms);
    const finish = (value: T | null) => {
      observer.disconnect();
      window.clearTimeout(timer);
      resolve(value);
    };
    observer.observe(node, {
      childList: true,
      subtree: true,
      characterData: true
    });
  });
}

function normalise(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** Press the dialog's own accept button (OK), which closes it the way a user would. */
function closeDialog(dialog: HTMLElement): void {
  const button =
    dialog.querySelector<HTMLButtonElement>(
      '.jp-Dialog-footer .jp-mod-accept'
    ) ?? dialog.querySelector<HTMLButtonElement>('.jp-Dialog-footer button');
  button?.click();
}

/** The kernel <select> of JupyterLab's "Select Kernel" dialog (about `path`'s notebook), if it is one. */
async function kernelSelector(
  dialog: HTMLElement,
  path: string | null
): Promise<HTMLSelectElement | null> {
  const select = await whenReady(
    dialog,
    () => dialog.querySelector<HTMLSelectElement>('.jp-Dialog-body select'),
    1000
  );
  if (
    !select ||
    (path && !(dialog.textContent ?? '').includes(PathExt.basename(path)))
  ) {
    return null;
  }
  return select;
}

/** The option of a kernel selector that starts this kernelspec. */
function optionFor(
  select: HTMLSelectElement,
  name: string
): HTMLOptionElement | null {
  for (const option of Array.from(select.options)) {
    try {
      if (JSON.parse(option.value)?.name === name) {
        return option;
      }
    } catch {
      // not a kernel choice
    }
  }
  return null;
}

export class RefusalDialogs {
  constructor(options: RefusalDialogs.IOptions) {
    this._options = options;
  }

  /** Watch the document for dialogs (only its direct children: dialogs attach there). */
  start(): void {
    if (this._observer) {
      return;
    }
    this._observer = new MutationObserver(records => {
      for (const record of records) {
        record.addedNodes.forEach(node => {
          if (
            node instanceof HTMLElement &&
            node.classList.contains('jp-Dialog')
          ) {
            const waiting = this._nextDialog.splice(0);
            waiting.forEach(resolve => resolve(node));
            void this._handle(node).catch(error =>
              console.warn('jupyter-vgpu: left a dialog as it is.', error)
            );
          }
        });
        record.removedNodes.forEach(node => {
          const widget = this._mounted.get(node);
          if (widget) {
            this._mounted.delete(node);
            widget.dispose();
          }
        });
      }
    });
    this._observer.observe(document.body, { childList: true });
  }

  dispose(): void {
    this._observer?.disconnect();
    this._observer = null;
  }

  private async _handle(dialog: HTMLElement): Promise<void> {
    const found = await whenReady(
      dialog,
      () => {
        const header = dialog.querySelector('.jp-Dialog-header');
        const pre = dialog.querySelector('.jp-Dialog-body pre');
        return header && pre && pre.textContent ? { header, pre } : null;
      },
      RENDER_TIMEOUT_MS
    );
    if (!found || !dialog.isConnected) {
      return;
    }
    const text = found.pre.textContent ?? '';
    const isKernelError = KERNEL_ERROR_TITLE.test(
      found.header.textContent ?? ''
    );
    const path = this._options.currentPath();
    if (STOPPED_WAITING.test(text)) {
      if (!isKernelError) {
        return;
      }
      const byYou = this._options.wasCancelled(path);
      if (byYou) {
        // A notification said so already; JupyterLab's kernel picker that may follow is
        // dismissed too, leaving the notebook without a kernel, as the user asked.
        const next = this._next(FOLLOW_UP_MS);
        dialog.classList.add('jp-vgpu-mod-closing');
        closeDialog(dialog);
        const follow = await next;
        if (follow && (await kernelSelector(follow, path))) {
          follow.classList.add('jp-vgpu-mod-closing');
          follow
            .querySelector<HTMLButtonElement>(
              '.jp-Dialog-footer .jp-mod-reject'
            )
            ?.click();
        }
        return;
      }
      this._mount(dialog, <StoppedWaitingView message={text} byYou={false} />);
      return;
    }
    dialog.classList.add('jp-vgpu-mod-pending');
    let refusal: IRefusal | null = null;
    try {
      refusal = await Promise.race([
        this._find(text, isKernelError ? path : null),
        new Promise<null>(resolve =>
          window.setTimeout(() => resolve(null), LOOKUP_TIMEOUT_MS)
        )
      ]);
    } finally {
      dialog.classList.remove('jp-vgpu-mod-pending');
    }
    if (!refusal || !dialog.isConnected) {
      return;
    }
    const shown = refusal;
    this._mount(
      dialog,
      <RefusalView
        refusal={shown}
        waiting={this._options.waitingKernel(shown)}
        onStart={name => void this._startKernel(dialog, shown, name)}
      />
    );
  }

  /**
   * The refusal this dialog shows: the one with the same text, else (for JupyterLab's kernel
   * error dialog) the newest of this notebook within the last half minute. Asks twice, in
   * case the dialog was quicker than the record.
   */
  private async _find(
    text: string,
    path: string | null
  ): Promise<IRefusal | null> {
    const wanted = normalise(text);
    for (let attempt = 0; attempt < 2; attempt++) {
      const now = this._options.serverNow();
      let refusals: IRefusal[];
      try {
        refusals = await this._options.client.refusals(
          now - 2 * SAME_NOTEBOOK_WINDOW_S
        );
      } catch {
        return null; // an older server without the route: leave the dialog as it is
      }
      const same = refusals.find(r => normalise(r.message ?? '') === wanted);
      if (same) {
        return same;
      }
      const recent = path
        ? refusals
            .filter(r => r.path === path && now - r.t <= SAME_NOTEBOOK_WINDOW_S)
            .sort((a, b) => b.t - a.t)[0]
        : undefined;
      if (recent) {
        return recent;
      }
      await new Promise(resolve => window.setTimeout(resolve, 400));
    }
    return null;
  }

  /** Hide the dialog's own body and show `view` in its place (above the buttons). */
  private _mount(dialog: HTMLElement, view: JSX.Element): void {
    const content = dialog.querySelector<HTMLElement>('.jp-Dialog-content');
    const footer = dialog.querySelector<HTMLElement>('.jp-Dialog-footer');
    if (!content || this._mounted.has(dialog)) {
      return;
    }
    const widget = ReactWidget.create(view);
    widget.addClass('jp-vgpu-DialogBody');
    Widget.attach(
      widget,
      content,
      footer && footer.parentElement === content ? footer : null
    );
    dialog.classList.add('jp-vgpu-mod-replaced');
    this._mounted.set(dialog, widget);
  }

  /**
   * Close the dialog and start the notebook on kernelspec `name`: through JupyterLab's own
   * "Select Kernel" dialog when it follows (a notebook's first start failed), else through the
   * notebook's session context.
   */
  private async _startKernel(
    dialog: HTMLElement,
    refusal: IRefusal,
    name: string
  ): Promise<void> {
    const path = refusal.path ?? this._options.currentPath();
    const context =
      this._options.contextFor(path) ??
      this._options.contextFor(this._options.currentPath());
    const next = this._next(FOLLOW_UP_MS);
    closeDialog(dialog);
    const follow = await next;
    const select = follow ? await kernelSelector(follow, path) : null;
    const option = select ? optionFor(select, name) : null;
    if (follow && select && option) {
      select.value = option.value;
      select.dispatchEvent(new Event('change', { bubbles: true }));
      follow
        .querySelector<HTMLButtonElement>('.jp-Dialog-footer .jp-mod-accept')
        ?.click();
      return;
    }
    if (context) {
      await context.changeKernel({ name });
    }
  }

  /** The next dialog to open within `ms`, or null. */
  private _next(ms: number): Promise<HTMLElement | null> {
    return new Promise(resolve => {
      const timer = window.setTimeout(() => {
        this._nextDialog = this._nextDialog.filter(r => r !== take);
        resolve(null);
      }, ms);
      const take = (dialog: HTMLElement) => {
        window.clearTimeout(timer);
        resolve(dialog);
      };
      this._nextDialog.push(take);
    });
  }

  private _mounted = new Map<Node, Widget>();
  private _nextDialog: ((dialog: HTMLElement) => void)[] = [];
  private _observer: MutationObserver | null = null;
  private _options: RefusalDialogs.IOptions;
}

export namespace RefusalDialogs {
  export interface IOptions {
    client: VGPUClient;
    /** Now on the server's clock (seconds since the epoch). */
    serverNow: () => number;
    /** The path of the notebook (or console) in the main area's current tab. */
    currentPath: () => string | null;
    /** The session context of the open notebook with this path. */
    contextFor: (path: string | null) => ISessionContext | null;
    /** Whether this browser cancelled the request of this notebook lately. */
    wasCancelled: (path: string | null) => boolean;
    /** An installed kernelspec that asks for what was refused but waits in line for it. */
    waitingKernel: (
      refusal: IRefusal
    ) => { name: string; display_name: string } | null;
  }
}
