/**
 * A kernel that died and that the server will not start again says why in the notebook. A kernel
 * whose launcher's engine ended what held it (a Slurm job that reached its time limit, or that its
 * user or an admin cancelled) is not asked for again by default: the server notes the sentence
 * with the kernel's id among its refusals (`GET /api/vgpu/refusals`, reason `job_ended`), and
 * JupyterLab itself only shows "dead". When a notebook's kernel dies, this looks for that note and
 * shows it, once, with what to do.
 */
import {
  Dialog,
  ISessionContext,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { pathLabel } from '../format/format';
import { IRefusal } from '../store/types';
import { sessionContextOf } from '../store/sessions';

/** Seconds before the death that a note of it may carry (the server notes it as the kernel dies). */
const SLACK = 120;

/** The note of the kernel `kernelId`'s end among `refusals`, or null. */
export function endOf(refusals: IRefusal[], kernelId: string): IRefusal | null {
  return (
    refusals.find(r => r.kernel_id === kernelId && r.reason === 'job_ended') ??
    null
  );
}

/** Follows every notebook in the main area; when its kernel dies, says why if the server knows. */
export class KernelEnds {
  constructor(options: KernelEnds.IOptions) {
    this._widgets = options.widgets;
    this._refusals = options.refusals;
  }

  /** Follow the widgets not followed yet (call when the main area's layout changes). */
  scan(): void {
    for (const widget of this._widgets()) {
      const context = sessionContextOf(widget);
      if (!context || this._followed.has(context)) {
        continue;
      }
      this._followed.add(context);
      let kernelId: string | null = context.session?.kernel?.id ?? null;
      context.statusChanged.connect((_, status) => {
        kernelId = context.session?.kernel?.id ?? kernelId;
        if (status === 'dead' && kernelId) {
          void this.said(kernelId, context);
        }
      });
    }
  }

  /** Show the server's note of the kernel's end, once; true when there was one. */
  async said(kernelId: string, context?: ISessionContext): Promise<boolean> {
    if (this._told.has(kernelId)) {
      return false;
    }
    let found: IRefusal | null = null;
    try {
      found = endOf(await this._refusals(Date.now() / 1000 - SLACK), kernelId);
    } catch (error) {
      console.warn('jupyter-vgpu: could not read why the kernel ended', error);
      return false;
    }
    if (!found) {
      return false;
    }
    this._told.add(kernelId);
    const where = pathLabel(context?.name || found.path) || 'this notebook';
    // JupyterLab cuts a notification at 140 characters: the gist, and the whole sentence (what
    // to do included) one click away.
    const message = found.message;
    Notification.warning(`${where}: ${found.summary || message}`, {
      autoClose: false,
      actions: [
        {
          label: 'Details',
          callback: () =>
            void showDialog({
              title: `${where}: its kernel ended`,
              body: message,
              buttons: [Dialog.okButton()]
            })
        }
      ]
    });
    return true;
  }

  private _followed = new WeakSet<ISessionContext>();
  private _told = new Set<string>();
  private _widgets: () => Iterable<Widget>;
  private _refusals: (since: number) => Promise<IRefusal[]>;
}

export namespace KernelEnds {
  export interface IOptions {
    /** The main area's widgets (`app.shell.widgets('main')`). */
    widgets: () => Iterable<Widget>;
    /** The server's refusals and notes after a time (`VGPUClient.refusals`). */
    refusals: (since: number) => Promise<IRefusal[]>;
  }
}
