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

/**
 * The words of a command line the server sends shell-quoted (`jupyter vgpu run` keeps its
 * command as Python's `shlex.join` writes it): `python -c 'print('"'"'hi'"'"')'` is
 * `python`, `-c`, `print('hi')`. Null for text a shell would not read (an open quote).
 */
export function shellWords(text: string): string[] | null {
  const words: string[] = [];
  let word: string | null = null;
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end < 0) {
        return null;
      }
      word = (word ?? '') + text.slice(i + 1, end);
      i = end + 1;
    } else if (c === '"') {
      let j = i + 1;
      let part = '';
      while (j < text.length && text[j] !== '"') {
        if (
          text[j] === '\\' &&
          j + 1 < text.length &&
          '"\\$`'.includes(text[j + 1])
        ) {
          j += 1;
        }
        part += text[j];
        j += 1;
      }
      if (j >= text.length) {
        return null;
      }
      word = (word ?? '') + part;
      i = j + 1;
    } else if (c === '\\' && i + 1 < text.length) {
      word = (word ?? '') + text[i + 1];
      i += 2;
    } else if (/\s/.test(c)) {
      if (word !== null) {
        words.push(word);
        word = null;
      }
      i += 1;
    } else {
      word = (word ?? '') + c;
      i += 1;
    }
  }
  if (word !== null) {
    words.push(word);
  }
  return words;
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
  // Read as the shell would, so no quoting shows: "python -c print('hi')".
  const text = w.holder ?? '';
  const words =
    text === VOCABULARY.hidden_holder.command ? null : shellWords(text);
  return commandLabel(words ? words.join(' ') : text) || `request ${w.ticket}`;
}

/** A notebook path or a command as a user names it: the notebook's file name, or the command. */
export function pathLabel(path: string | null | undefined): string {
  if (!path) {
    return '';
  }
  return path.endsWith('.ipynb') ? PathExt.basename(path) : path;
}
