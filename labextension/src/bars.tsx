/**
 * The small pictures: a GPU's stacked memory bar, a slice's used-vs-reserved bar, a sparkline.
 */
import * as React from 'react';

import { IDevice, ISlice } from './api';
import { formatBytes, holderLabel, share } from './format';

/** The memory one slice uses on one of its GPUs (the server sums over all of them). */
export function usedPerGPU(slice: ISlice): number | null {
  if (slice.memory_used === null || slice.memory_used === undefined) {
    return null;
  }
  return slice.memory_used / Math.max(1, slice.gpus.length);
}

/** The memory one slice uses on this GPU: measured per GPU when the server can, else an even share. */
export function usedOn(slice: ISlice, uuid: string): number | null {
  const measured = slice.memory_used_by_gpu?.[uuid];
  return typeof measured === 'number' ? measured : usedPerGPU(slice);
}

function percent(fraction: number): string {
  return `${(fraction * 100).toFixed(3)}%`;
}

/**
 * One GPU's memory, left to right: each slice in its kernel's colour (pale = reserved,
 * solid = used), then memory used by processes without a slice (hatched), then free.
 */
export function DeviceBar(props: {
  device: IDevice;
  slices: ISlice[];
  colour: (sliceId: string) => number;
}): JSX.Element {
  const { device, slices, colour } = props;
  const total = device.memory_total;
  return (
    <div
      className="jp-vgpu-DeviceBar"
      role="img"
      aria-label={`GPU ${device.index}: ${formatBytes(device.memory_reserved)} reserved, ${formatBytes(device.memory_foreign)} used by other processes, of ${formatBytes(total)}`}
    >
      {slices.map(slice => {
        const used = usedOn(slice, device.uuid);
        return (
          <div
            key={slice.id}
            className={`jp-vgpu-DeviceBar-slice jp-vgpu-colour-${colour(slice.id)} jp-vgpu-mod-${slice.state}`}
            data-slice-id={slice.id}
            style={{ width: percent(share(slice.memory_reserved, total)) }}
            title={`${holderLabel(slice)}: ${formatBytes(used)} used of ${formatBytes(slice.memory_reserved)} reserved`}
          >
            <div
              className="jp-vgpu-DeviceBar-used"
              style={{ width: percent(share(used, slice.memory_reserved)) }}
            />
          </div>
        );
      })}
      {device.memory_foreign > 0 && (
        <div
          className="jp-vgpu-DeviceBar-foreign"
          style={{ width: percent(share(device.memory_foreign, total)) }}
          title={`Other processes (no slice): ${formatBytes(device.memory_foreign)}`}
        />
      )}
    </div>
  );
}

/** A slice's own bar: used against reserved, coloured like its segment in the GPU bar. */
export function SliceBar(props: {
  slice: ISlice;
  colour: number;
}): JSX.Element {
  const { slice, colour } = props;
  const used = usedPerGPU(slice);
  return (
    <div
      className={`jp-vgpu-SliceBar jp-vgpu-colour-${colour} jp-vgpu-mod-${slice.state}`}
      role="meter"
      aria-valuemin={0}
      aria-valuemax={slice.memory_reserved}
      aria-valuenow={used ?? undefined}
      aria-label="GPU memory used of reserved"
    >
      <div
        className="jp-vgpu-SliceBar-used"
        style={{ width: percent(share(used, slice.memory_reserved)) }}
      />
    </div>
  );
}

/** Utilisation over the last samples, 0-100 %, as a line. */
export function Sparkline(props: {
  values: (number | null)[];
  title: string;
}): JSX.Element | null {
  const values = props.values.slice(-30);
  if (values.length < 2) {
    return null;
  }
  const width = 60;
  const height = 16;
  const step = width / (values.length - 1);
  const points = values
    .map((v, i) => {
      const y = height - ((v ?? 0) / 100) * (height - 2) - 1;
      return `${(i * step).toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
  return (
    <svg
      className="jp-vgpu-Sparkline"
      width={width}
      height={height}
      viewBox={`0 0 ${width} ${height}`}
      role="img"
      aria-label={props.title}
    >
      <title>{props.title}</title>
      <polyline points={points} />
    </svg>
  );
}
