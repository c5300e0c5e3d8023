/**
 * A notice in the GPU dashboard: loading, empty, or an error (with `role="alert"`), a title and
 * what the caller puts under it.
 */
import * as React from 'react';

/** A notice of `kind` ("loading", "empty", "error"): its title, then its children. */
export function Notice(props: {
  kind: string;
  title: string;
  role?: string;
  children?: React.ReactNode;
}): JSX.Element {
  return (
    <div
      className={`jp-vgpu-Dashboard-notice jp-vgpu-mod-${props.kind}`}
      role={props.role ?? 'status'}
    >
      <p className="jp-vgpu-Dashboard-noticeTitle">{props.title}</p>
      {props.children}
    </div>
  );
}
