/**
 * GPU hints in JupyterLab's "Select Kernel" dialog: beside each sliced kernelspec in the list,
 * whether its slice fits on the GPUs now ("fits now", "no room now: waits"), and under the list
 * what the chosen one asks for and where it would go.
 *
 * JupyterLab builds that dialog's list itself (a `<select>` whose options' values are
 * `{"name": ...}` as JSON) and offers no hook into it, so each option's text is amended where the
 * dialog is made (`Dialog.tracker.widgetAdded`); the values stay as JupyterLab wrote them, so the
 * choice is unchanged. The GPUs are read while the dialog is open.
 *
 * JupyterLab pre-selects the notebook's kernel (after a reload, or after a refused start: the
 * refused one). When that kernel's slice has no room now, the largest kernel that fits and asks
 * for no more is selected instead, once, at the first reading of the GPUs, unless the user has
 * chosen already; the hint says so.
 */
import { KernelSpec } from '@jupyterlab/services';
import { ISignal } from '@lumino/signaling';

import {
  kernelspecFit,
  roomierChoice,
  sliceConfig
} from '../store/kernelspecs';
import { GPUModel } from '../store/model';

/** The class of the hint under the list. */
export const HINT_CLASS = 'jp-vgpu-KernelHint';

/** A dialog as the tracker hands it over: its node, and a signal when it goes. */
interface IDialogLike {
  node: HTMLElement;
  disposed: ISignal<unknown, unknown>;
}

/** The kernelspec name an option of the picker stands for, or null (another kind of option). */
function optionKernel(option: HTMLOptionElement): string | null {
  try {
    const value = JSON.parse(option.value);
    return value && typeof value.name === 'string' && !value.id
      ? value.name
      : null;
  } catch {
    return null;
  }
}

export class KernelPickerHints {
  constructor(options: KernelPickerHints.IOptions) {
    this._model = options.model;
    this._kernelspecs = options.kernelspecs;
    options.dialogAdded.connect(this._onDialog, this);
  }

  private _onDialog(_: unknown, added: unknown): void {
    const dialog = added as IDialogLike;
    const select = dialog?.node?.querySelector?.('select');
    if (!select) {
      return;
    }
    const specs = this._kernelspecs.specs?.kernelspecs ?? {};
    const sliced = Array.from(select.options).filter(o => {
      const name = optionKernel(o);
      return name !== null && sliceConfig(specs[name]) !== null;
    });
    if (sliced.length === 0) {
      return; // no sliced kernelspec in it (or not a kernel picker)
    }
    const labels = new Map(sliced.map(o => [o, o.text] as const));
    const hint = document.createElement('p');
    hint.className = HINT_CLASS;
    hint.setAttribute('role', 'status');
    // After JupyterLab's wrapper of the list (a box of the list's height), in the dialog's body.
    (select.closest('.jp-select-wrapper') ?? select).insertAdjacentElement(
      'afterend',
      hint
    );
    // The pre-selection is looked at once, at the first reading of the GPUs since the dialog
    // opened (the store's last one may be old), and never after the user chose.
    const choice: IChoice = { read: false, settled: false, instead: null };
    const update = () => this._decorate(select, labels, hint, choice);
    select.addEventListener('change', () => {
      choice.settled = true;
      choice.instead = null;
      update();
    });
    // The GPUs are read while the dialog is open, and each reading updates the hints.
    const unsubscribe = this._model.subscribe(() => ({ devices: true }));
    const read = () => {
      choice.read = true;
      update();
    };
    this._model.changed.connect(read);
    dialog.disposed.connect(() => {
      unsubscribe();
      this._model.changed.disconnect(read);
    });
    update();
    void this._model.refresh();
  }

  private _decorate(
    select: HTMLSelectElement,
    labels: Map<HTMLOptionElement, string>,
    hint: HTMLElement,
    choice: IChoice
  ): void {
    const specs = this._kernelspecs.specs?.kernelspecs ?? {};
    const snapshot = this._model.snapshot;
    const devices = snapshot?.devices.available ? snapshot.devices.devices : [];
    const simulated = !!snapshot?.devices.simulated;
    if (choice.read && !choice.settled && devices.length > 0) {
      choice.settled = true;
      this._preferRoom(select, labels, specs, devices, choice);
    }
    labels.forEach((label, option) => {
      const fit = kernelspecFit(specs[optionKernel(option) ?? ''], devices);
      option.text = fit ? `${label} · ${fit.short}` : label;
      option.title = fit?.sentence ?? '';
      option.dataset.jpVgpuFits = fit ? String(fit.fits) : '';
    });
    const chosen = select.selectedOptions[0];
    const name = chosen ? optionKernel(chosen) : null;
    const fit = name ? kernelspecFit(specs[name], devices) : null;
    if (fit) {
      const instead = choice.instead
        ? ` Chosen for you: “${choice.instead}” has no room now.`
        : '';
      hint.textContent = `${specs[name!]?.display_name ?? name}: ${fit.sentence}${simulated ? ' (simulated GPUs)' : ''}${instead}`;
      hint.dataset.jpVgpuFits = String(fit.fits);
    } else {
      // A sliced kernel before the GPUs are read; a kernel without a slice; no kernel.
      const sliced = name !== null && sliceConfig(specs[name]) !== null;
      hint.textContent = sliced
        ? 'Reading the GPUs…'
        : name
          ? 'This kernel has no GPU slice.'
          : '';
      delete hint.dataset.jpVgpuFits;
    }
  }

  /** Select a kernel with room instead of a pre-selected one without (see the module's doc). */
  private _preferRoom(
    select: HTMLSelectElement,
    labels: Map<HTMLOptionElement, string>,
    specs: { [name: string]: KernelSpec.ISpecModel | undefined },
    devices: Parameters<typeof kernelspecFit>[1],
    choice: IChoice
  ): void {
    const chosen = select.selectedOptions[0];
    const name = chosen ? optionKernel(chosen) : null;
    const options = Array.from(labels.keys());
    const names = options.map(o => optionKernel(o) ?? '');
    const better = name ? roomierChoice(specs, name, names, devices) : null;
    if (better !== null) {
      select.value = options[names.indexOf(better)].value;
      choice.instead = specs[name!]?.display_name ?? name;
    }
  }

  private _kernelspecs: KernelSpec.IManager;
  private _model: GPUModel;
}

/**
 * A dialog's pre-selection: whether the GPUs were read since it opened, whether it was looked at
 * (or chosen by the user), and the kernel it replaced.
 */
interface IChoice {
  read: boolean;
  settled: boolean;
  instead: string | null;
}

export namespace KernelPickerHints {
  export interface IOptions {
    model: GPUModel;
    kernelspecs: KernelSpec.IManager;
    /** Each dialog JupyterLab makes (`Dialog.tracker.widgetAdded`). */
    dialogAdded: ISignal<unknown, unknown>;
  }
}
