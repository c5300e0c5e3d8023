/**
 * Launcher cards of sliced kernelspecs in order of slice size ("1/10", "1/4", "1/2", "1 GPU",
 * "2 GPUs") instead of as text ("1 GPU", "1/10", "1/2", ...). Of equal sizes the plain one comes
 * first ("1/2" before "1/2, 2 devices" and "1 GPU" before "1 GPU, waits", which text order turns
 * round: "," sorts before ")").
 *
 * JupyterLab sorts launcher items by rank and then by label, and offers no hook to change that,
 * so each card container is reordered in place: sliced kernelspecs' cards swap among the places
 * they hold, every other card stays where JupyterLab put it. The DOM order changes (not just the
 * look), so keyboard and screen readers follow the same order. A MutationObserver per launcher
 * puts the order back whenever the launcher renders again; it moves nothing when the order is
 * already right, so its own moves do not feed it.
 *
 * On simulated GPUs each launcher carries `data-jp-vgpu-simulated="true"` (on the launcher's own
 * node, which JupyterLab's React rendering leaves alone), and the stylesheet's "GPU" badge of a
 * sliced card reads "simulated GPU".
 */
import { KernelSpec } from '@jupyterlab/services';

import { sliceConfig, sliceSize } from './store/kernelspecs';

/** Settings that make a slice a size, not a variant of one. */
const SIZE_KEYS = new Set(['gpu_fraction', 'gpu_memory', 'gpus', 'launcher']);

/**
 * Where a sliced kernelspec's card goes among the others: its size (an amount compared with a
 * share through `gpuMemory`; without it, after every share), then plain before a variant (more
 * settings than its size: logical devices, a wait in line, a limit). Null without a slice.
 */
export function launcherRank(
  spec: KernelSpec.ISpecModel | undefined,
  gpuMemory: number | null
): [number, number, number] | null {
  const size = sliceSize(spec, gpuMemory);
  if (!size) {
    return null;
  }
  const variant = Object.keys(sliceConfig(spec) ?? {}).some(
    key => !SIZE_KEYS.has(key)
  );
  return [size[0], size[1], variant ? 1 : 0];
}

function compare(a: number[], b: number[]): number {
  return a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
}

export class LauncherOrder {
  constructor(options: LauncherOrder.IOptions) {
    this._kernelspecs = options.kernelspecs;
    this._gpuMemory = options.gpuMemory;
    this._kernelspecs.specsChanged.connect(this._sortAll, this);
  }

  /** Find launchers in the document that are not followed yet, follow and sort them. */
  scan(): void {
    document.querySelectorAll<HTMLElement>('.jp-Launcher').forEach(node => {
      if (this._watched.has(node)) {
        return;
      }
      const observer = new MutationObserver(() => this._sort(node));
      observer.observe(node, { childList: true, subtree: true });
      this._watched.set(node, observer);
      this._mark(node);
      this._sort(node);
    });
    // Forget launchers that were closed.
    for (const [node, observer] of Array.from(this._watched)) {
      if (!node.isConnected) {
        observer.disconnect();
        this._watched.delete(node);
      }
    }
  }

  /** Whether the GPUs are simulated: the sliced cards' badge says so. */
  get simulated(): boolean {
    return this._simulated;
  }
  set simulated(value: boolean) {
    if (value !== this._simulated) {
      this._simulated = value;
      this._watched.forEach((_, node) => this._mark(node));
    }
  }

  /** Sort every followed launcher again (the GPUs' size became known, say). */
  update(): void {
    this._sortAll();
  }

  dispose(): void {
    this._watched.forEach(observer => observer.disconnect());
    this._watched.clear();
    this._kernelspecs.specsChanged.disconnect(this._sortAll, this);
  }

  private _mark(launcher: HTMLElement): void {
    if (this._simulated) {
      launcher.dataset.jpVgpuSimulated = 'true';
    } else {
      delete launcher.dataset.jpVgpuSimulated;
    }
  }

  private _sortAll(): void {
    this._watched.forEach((_, node) => this._sort(node));
  }

  /** Ranks of the sliced kernelspecs, by display name (the launcher card's title). */
  private _sizes(): Map<string, [number, number, number]> {
    const sizes = new Map<string, [number, number, number]>();
    const specs = this._kernelspecs.specs?.kernelspecs ?? {};
    const memory = this._gpuMemory();
    for (const spec of Object.values(specs)) {
      const size = launcherRank(spec, memory);
      if (spec && size) {
        sizes.set(spec.display_name, size);
      }
    }
    return sizes;
  }

  private _sort(launcher: HTMLElement): void {
    const sizes = this._sizes();
    if (sizes.size < 2) {
      return;
    }
    launcher
      .querySelectorAll<HTMLElement>('.jp-Launcher-cardContainer')
      .forEach(container => {
        const cards = Array.from(container.children) as HTMLElement[];
        const slots: number[] = [];
        const sliced: {
          card: HTMLElement;
          size: [number, number, number];
          index: number;
        }[] = [];
        cards.forEach((card, index) => {
          const size = card.classList.contains('jp-LauncherCard')
            ? sizes.get(card.getAttribute('title') ?? '')
            : undefined;
          if (size) {
            slots.push(index);
            sliced.push({ card, size, index });
          }
        });
        if (sliced.length < 2) {
          return;
        }
        // Stable: equal sizes keep JupyterLab's order among themselves.
        sliced.sort((a, b) => compare(a.size, b.size) || a.index - b.index);
        const wanted = cards.slice();
        slots.forEach((slot, i) => (wanted[slot] = sliced[i].card));
        if (wanted.every((card, i) => card === cards[i])) {
          return;
        }
        wanted.forEach((card, i) => {
          if (container.children[i] !== card) {
            container.insertBefore(card, container.children[i] ?? null);
          }
        });
      });
  }

  private _gpuMemory: () => number | null;
  private _kernelspecs: KernelSpec.IManager;
  private _simulated = false;
  private _watched = new Map<HTMLElement, MutationObserver>();
}

export namespace LauncherOrder {
  export interface IOptions {
    kernelspecs: KernelSpec.IManager;
    /** The memory of one GPU, to compare "8 GiB" with "1/4"; null when unknown. */
    gpuMemory: () => number | null;
  }
}
