/**
 * What a user calls the holder of a slice or of a place in line: a notebook, a command, a kernel.
 */
import { PathExt } from '@jupyterlab/coreutils';
import { ISlice, IWaiting } from '../store/api';

import { VOCABULARY } from './tiers';

/** The command line of a `jupyter vgpu run` holder, as one string. */
export function commandText(slice: ISlice): string {
  if (Array.isArray(slice.command)) {
    return slice.command.join(' ');
  }
  return slice.command ?? '';
}

/**
 * What a user calls the holder of a slice: the notebook's file name, the command, or the kernel.
 */
export function holderLabel(slice: ISlice): string {
  if (slice.holder_kind === 'command') {
    // "/opt/conda/bin/python train.py" reads as "python train.py"; the tooltip has it all.
    return commandLabel(commandText(slice)) || `slice ${slice.id}`;
  }
  if (slice.path) {
    return PathExt.basename(slice.path);
  }
  return slice.kernel_id ? kernelLabel(slice.kernel_id) : `slice ${slice.id}`;
}

/**
 * "kernel 1a2b3c4d" for a kernel known by its id only; another user's kernel, whose id the
 * server withholds, as the server names it ("another user's kernel").
 */
export function kernelLabel(kernelId: string): string {
  return kernelId === VOCABULARY.hidden_holder.kernel
    ? kernelId
    : `kernel ${kernelId.slice(0, 8)}`;
}

/**
 * A command line as a user reads it: "/opt/conda/bin/python train.py" is "python train.py" (the
 * program's name, its arguments); another user's command as the server names it.
 */
export function commandLabel(text: string): string {
  if (text === VOCABULARY.hidden_holder.command) {
    return text;
  }
  const [program, ...args] = text.trim().split(/\s+/);
  return program ? [PathExt.basename(program), ...args].join(' ') : '';
}

/** What a user calls a waiting request: its notebook's name, the kernel, or the command. */
export function waiterLabel(w: IWaiting): string {
  if (w.holder_kind === 'kernel') {
    if (w.path) {
      return pathLabel(w.path);
    }
    const id = w.kernel_id ?? w.holder;
    return id ? kernelLabel(id) : `request ${w.ticket}`;
  }
  return commandLabel(w.holder ?? '') || `request ${w.ticket}`;
}

/** A notebook path or a command as a user names it: the notebook's file name, or the command. */
export function pathLabel(path: string | null | undefined): string {
  if (!path) {
    return '';
  }
  return path.endsWith('.ipynb') ? PathExt.basename(path) : path;
}
