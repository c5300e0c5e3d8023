/**
 * Small shared pieces: the "watched" chip, the caret that expands a card or a row, a holder's
 * name (a link to its notebook) and the warning beside a figure.
 */
import { caretDownIcon, caretRightIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

/** The watchdog compares this slice's (or GPU's slices') use with the reservation. */
export function WatchedChip(props: { what?: string }): JSX.Element {
  const title =
    `The server watches ${props.what ?? 'this slice'}: memory used beyond the reservation ` +
    "triggers the admin's policy (warn, interrupt, restart or shut down).";
  return (
    <span className="jp-vgpu-Chip jp-vgpu-mod-watched" title={title}>
      watched
    </span>
  );
}

/** A caret button that shows or hides a region (`controls` is the region's id). */
export function Disclosure(props: {
  expanded: boolean;
  onToggle: () => void;
  controls: string;
  label: string;
}): JSX.Element {
  const Icon = props.expanded ? caretDownIcon : caretRightIcon;
  return (
    <button
      className="jp-Button jp-mod-minimal jp-vgpu-Disclosure"
      aria-expanded={props.expanded}
      aria-controls={props.controls}
      aria-label={props.label}
      title={`${props.expanded ? 'Hide' : 'Show'} ${props.label.charAt(0).toLowerCase()}${props.label.slice(1)}`}
      onClick={props.onToggle}
    >
      <Icon.react tag="span" elementSize="small" />
    </button>
  );
}

/**
 * Who holds a slice or waits, by name: a link that opens the notebook when `path` is one (a
 * console's session path is not a file), else the name, its tooltip `title` (the name itself by
 * default).
 */
export function HolderName(props: {
  label: string;
  path: string | null | undefined;
  className: string;
  title?: string;
  openNotebook: (path: string) => void;
}): JSX.Element {
  const { label, path, className, openNotebook } = props;
  if (path?.endsWith('.ipynb')) {
    return (
      <button
        className={`${className} jp-vgpu-mod-link`}
        title={`Open ${path}`}
        onClick={() => openNotebook(path)}
      >
        {label}
      </button>
    );
  }
  return (
    <span className={className} title={props.title ?? label}>
      {label}
    </span>
  );
}

/** "⚠" beside a use near or over its reservation (`warning` says which); nothing without one. */
export function WarningMark(props: {
  warning: string | null;
}): JSX.Element | null {
  const { warning } = props;
  if (!warning) {
    return null;
  }
  return (
    <span
      className="jp-vgpu-SliceRow-warning"
      role="status"
      title={warning}
      aria-label={warning}
    >
      ⚠
    </span>
  );
}
