/**
 * Small shared pieces: the "watched" chip and the caret that expands a card or a row.
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
