/**
 * One legend of the memory bars' keys, for the sidebar's bars and the dashboard's cluster view:
 * each key a swatch in its kind's style, its words, and what it means on hover.
 */
import * as React from 'react';

/** A key: its kind (the bars' `jp-vgpu-mod-<kind>`), its words, what it means. */
export type LegendKey = [kind: string, label: string, title: string];

export function Legend(props: {
  keys: LegendKey[];
  label: string;
  className?: string;
  children?: React.ReactNode;
}): JSX.Element {
  const className = ['jp-vgpu-Legend', props.className]
    .filter(Boolean)
    .join(' ');
  return (
    <ul className={className} aria-label={props.label}>
      {props.keys.map(([kind, label, title]) => (
        <li
          key={kind}
          className={`jp-vgpu-Legend-item jp-vgpu-mod-${kind}`}
          title={title}
        >
          <span
            className={`jp-vgpu-Legend-swatch jp-vgpu-mod-${kind}`}
            aria-hidden="true"
          />
          {label}
        </li>
      ))}
      {props.children}
    </ul>
  );
}

/** Render again whenever `model.changed` fires (a Lumino signal), for as long as it is shown. */
export function useChanged(model: {
  changed: {
    connect(slot: () => void): boolean;
    disconnect(slot: () => void): boolean;
  };
}): void {
  const [, setVersion] = React.useState(0);
  React.useEffect(() => {
    const changed = () => setVersion(n => n + 1);
    model.changed.connect(changed);
    return () => {
      model.changed.disconnect(changed);
    };
  }, [model]);
}
