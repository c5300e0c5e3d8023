/**
 * JupyterLab's own "Error Starting Kernel" dialog, made readable for refused GPU slices.
 *
 * A refused start names its refusal (RefusedStarts, from JupyterLab's session services); the
 * dialogs JupyterLab makes for that failure in the same turn of the event loop (Dialog.tracker)
 * are its error dialog and, when the notebook's first kernel failed, the "Select Kernel" dialog
 * queued behind it. The refusal is read by its id (`GET /api/vgpu/refusals/<id>`) and replaces
 * the error dialog's body: a formatted view with "Start <a kernel that fits>" buttons. A start
 * that stopped waiting in line because this browser cancelled it closes both dialogs (a
 * notification said so already); otherwise it gets a short note. Anything else, or any failure
 * here, leaves the dialog as it is.
 */
import { Dialog, ISessionContext } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import { ISignal } from '@lumino/signaling';
import { Panel, PanelLayout, Widget } from '@lumino/widgets';
import * as React from 'react';

import { IRefusal, VGPUClient } from '../store/api';
import { IRefusedStart } from './kernelstarts';
import { RefusalView, StoppedWaitingView } from './refusal';

/** How long the original body stays hidden while the refusal is looked up (ms). */
const LOOKUP_TIMEOUT_MS = 2500;

/** A dialog as the refusal dialogs handle it (JupyterLab's Dialog; a fake in tests). */
export interface IStartDialog {
  readonly isDisposed: boolean;
  /** A dialog that asks for a value (JupyterLab's kernel picker), not a message. */
  readonly asksForValue: boolean;
  addClass(name: string): void;
  removeClass(name: string): void;
  /** Show `view` in place of the dialog's body, above its buttons. */
  mount(view: JSX.Element): void;
  /** Close it as its default button (Ok) would. */
  close(): void;
  /** Close it as Cancel would. */
  dismiss(): void;
}

/** JupyterLab's Dialog, through its Lumino layout: a content panel of header, body, footer. */
export class LabDialog implements IStartDialog {
  constructor(readonly dialog: Dialog<unknown>) {}

  get isDisposed(): boolean {
    return this.dialog.isDisposed;
  }

  get asksForValue(): boolean {
    const body = this._content()?.widgets[1] as
      (Widget & { getValue?: unknown }) | undefined;
    return typeof body?.getValue === 'function';
  }

  addClass(name: string): void {
    this.dialog.addClass(name);
  }

  removeClass(name: string): void {
    this.dialog.removeClass(name);
  }

  mount(view: JSX.Element): void {
    const content = this._content();
    if (!content || this.dialog.hasClass('jp-vgpu-mod-replaced')) {
      return;
    }
    const widget = ReactWidget.create(view);
    widget.addClass('jp-vgpu-DialogBody');
    content.insertWidget(Math.max(0, content.widgets.length - 1), widget);
    this.dialog.addClass('jp-vgpu-mod-replaced'); // the stylesheet hides JupyterLab's body
  }

  close(): void {
    this.dialog.resolve();
  }

  dismiss(): void {
    this.dialog.reject();
  }

  private _content(): Panel | null {
    const layout = this.dialog.layout;
    const content = layout instanceof PanelLayout ? layout.widgets[0] : null;
    return content instanceof Panel ? content : null;
  }
}

/** A refused start and the dialogs JupyterLab made for it. */
interface IPending {
  start: IRefusedStart;
  error: IStartDialog | null;
  picker: IStartDialog | null;
}

export class RefusalDialogs {
  constructor(options: RefusalDialogs.IOptions) {
    this._options = options;
  }

  /** Follow refused starts and the dialogs that answer them. */
  start(): void {
    if (this._started) {
      return;
    }
    this._started = true;
    this._options.refused.connect(this._onRefused, this);
    this._options.dialogAdded.connect(this._onDialog, this);
  }

  dispose(): void {
    this._options.refused.disconnect(this._onRefused, this);
    this._options.dialogAdded.disconnect(this._onDialog, this);
    this._open = [];
  }

  /**
   * A refused start: the dialogs JupyterLab makes for it come in this turn of the event loop
   * (the services reject, JupyterLab's session context shows the error and, for a notebook's
   * first kernel, asks for another): take those, then lay the refusal out in the error dialog.
   */
  private _onRefused(_: unknown, start: IRefusedStart): void {
    const pending: IPending = { start, error: null, picker: null };
    this._open.push(pending);
    setTimeout(() => {
      this._open = this._open.filter(p => p !== pending);
      void this._handle(pending).catch(error =>
        console.warn('jupyter-vgpu: left a dialog as it is.', error)
      );
    }, 0);
  }

  private _onDialog(_: unknown, dialog: unknown): void {
    const pending = this._open[0];
    if (!pending) {
      return;
    }
    const wrapped = this._options.wrap
      ? this._options.wrap(dialog)
      : new LabDialog(dialog as Dialog<unknown>);
    if (!pending.error && !wrapped.asksForValue) {
      pending.error = wrapped;
      // Hidden at once while the refusal is looked up (or the dialog closed, when the
      // start stopped waiting in line because this browser cancelled it).
      wrapped.addClass(
        this._options.wasCancelled(pending.start.path)
          ? 'jp-vgpu-mod-closing'
          : 'jp-vgpu-mod-pending'
      );
    } else if (pending.error && !pending.picker && wrapped.asksForValue) {
      pending.picker = wrapped;
    }
  }

  private async _handle(pending: IPending): Promise<void> {
    const { error, picker, start } = pending;
    if (!error) {
      return; // nothing of JupyterLab's answered this start
    }
    let refusal: IRefusal | null = null;
    try {
      refusal = await Promise.race([
        this._options.client.refusal(start.refusalId).catch(() => null),
        new Promise<null>(resolve =>
          setTimeout(() => resolve(null), LOOKUP_TIMEOUT_MS)
        )
      ]);
    } finally {
      error.removeClass('jp-vgpu-mod-pending');
    }
    const path = start.path ?? refusal?.path ?? null;
    if (refusal?.reason === 'cancelled' && this._options.wasCancelled(path)) {
      // A notification said so already; JupyterLab's kernel picker that may follow is
      // dismissed too, leaving the notebook without a kernel, as the user asked.
      error.close();
      picker?.dismiss();
      return;
    }
    error.removeClass('jp-vgpu-mod-closing');
    if (!refusal || error.isDisposed) {
      return;
    }
    if (refusal.reason === 'cancelled') {
      error.mount(
        <StoppedWaitingView message={refusal.message} byYou={false} />
      );
      return;
    }
    const shown = refusal;
    error.mount(
      <RefusalView
        refusal={shown}
        waiting={this._options.waitingKernel(shown)}
        onStart={name => void this._startKernel(pending, shown, name)}
      />
    );
  }

  /**
   * Close the dialog (and JupyterLab's kernel picker queued behind it) and start the notebook
   * on kernelspec `name`.
   */
  private async _startKernel(
    pending: IPending,
    refusal: IRefusal,
    name: string
  ): Promise<void> {
    const { contextFor, currentPath } = this._options;
    const context =
      contextFor(pending.start.path) ??
      contextFor(refusal.path) ??
      contextFor(currentPath());
    pending.error?.close();
    pending.picker?.dismiss();
    if (context) {
      await context.changeKernel({ name });
    }
  }

  private _open: IPending[] = [];
  private _options: RefusalDialogs.IOptions;
  private _started = false;
}

export namespace RefusalDialogs {
  export interface IOptions {
    client: Pick<VGPUClient, 'refusal'>;
    /** Refused kernel starts, as the services reject them (RefusedStarts). */
    refused: ISignal<unknown, IRefusedStart>;
    /** Each dialog JupyterLab makes (`Dialog.tracker.widgetAdded`). */
    dialogAdded: ISignal<unknown, unknown>;
    /** The dialogs as handled here (JupyterLab's through LabDialog, by default). */
    wrap?: (dialog: unknown) => IStartDialog;
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
