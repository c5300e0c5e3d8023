/**
 * A kernelspec installed while JupyterLab runs (`jupyter vgpu kernelspec install` in a terminal)
 * shows in the launcher and the kernel picker at once, and a notification says so: the server's
 * sample carries a word that changes with the kernelspecs (`kernelspecs`, docs/rest.md), and
 * JupyterLab's kernelspec manager is asked to read them again when it does (on its own it reads
 * them once a minute).
 */
import { Notification } from '@jupyterlab/apputils';
import { KernelSpec } from '@jupyterlab/services';

import { GPUModel } from './model';

/** "New kernel “Python 3 (1/2 GPU)”: in the launcher and in Kernel › Change Kernel…". */
export function newKernelText(displayNames: string[]): string {
  const names = displayNames.map(n => `“${n}”`).join(', ');
  return `${displayNames.length === 1 ? 'New kernel' : 'New kernels'} ${names}: in the launcher and in Kernel › Change Kernel…`;
}

export class KernelspecWatch {
  constructor(options: KernelspecWatch.IOptions) {
    this._model = options.model;
    this._kernelspecs = options.kernelspecs;
    this._notify =
      options.notify ??
      (text => void Notification.info(text, { autoClose: 10000 }));
    this._model.changed.connect(this._onModel, this);
  }

  dispose(): void {
    this._model.changed.disconnect(this._onModel, this);
  }

  private _onModel(): void {
    const stamp = this._model.kernelspecs;
    if (stamp === null || stamp === this._stamp) {
      return;
    }
    const first = this._stamp === null;
    this._stamp = stamp;
    if (!first) {
      void this._refresh();
    }
  }

  /** Read the kernelspecs again; tell of those that are new. */
  private async _refresh(): Promise<void> {
    const before = new Set(
      Object.keys(this._kernelspecs.specs?.kernelspecs ?? {})
    );
    try {
      await this._kernelspecs.refreshSpecs();
    } catch (error) {
      console.warn(
        'jupyter-vgpu: could not read the kernelspecs again.',
        error
      );
      return;
    }
    const specs = this._kernelspecs.specs?.kernelspecs ?? {};
    const added = Object.keys(specs)
      .filter(name => !before.has(name))
      .map(name => specs[name]?.display_name ?? name)
      .sort();
    if (added.length > 0) {
      this._notify(newKernelText(added));
    }
  }

  private _kernelspecs: KernelSpec.IManager;
  private _model: GPUModel;
  private _notify: (text: string) => void;
  private _stamp: string | null = null;
}

export namespace KernelspecWatch {
  export interface IOptions {
    model: GPUModel;
    kernelspecs: KernelSpec.IManager;
    /** How to tell the user (default: a JupyterLab notification). */
    notify?: (text: string) => void;
  }
}
