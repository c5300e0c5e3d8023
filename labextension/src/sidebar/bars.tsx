/**
 * The small pictures: a GPU's stacked memory bar, a slice's used-vs-reserved bar, a sparkline.
 */
import * as React from 'react';
import { Legend, LegendKey } from '../charts/legend';
import { IDevice, ISlice } from '../store/api';
import {
  burstsHeldText,
  burstsOn,
  burstWithinLimit,
  elasticOf,
  elasticParts,
  formatBytes,
  formatUsage,
  IElastic,
  holderLabel,
  share,
  usedOfReserved,
  usedOn,
  usedPerGPU
} from '../format/format';

export { usedOn, usedPerGPU };

function percent(fraction: number): string {
  return `${(fraction * 100).toFixed(3)}%`;
}

/**
 * One GPU's memory, left to right: each slice in its kernel's colour (pale = reserved,
 * solid = used; an elastic slice's burst above its request hatched after it), then memory used by
 * processes without a slice (hatched grey), then free.
 */
export function DeviceBar(props: {
  device: IDevice;
  slices: ISlice[];
  colour: (sliceId: string) => number;
  /** The slice whose row is hovered: its part of the bar stands out. */
  highlighted?: string | null;
  onHover?: (sliceId: string | null) => void;
}): JSX.Element {
  const { device, slices, colour, highlighted, onHover } = props;
  const total = device.memory_total;
  const label = [
    `GPU ${device.index}: ${formatBytes(device.memory_reserved)} reserved`,
    ...burstsHeldText(burstsOn(slices, device.uuid)),
    `${formatBytes(device.memory_foreign)} used by other processes, of ${formatBytes(total)}`
  ].join(', ');
  return (
    <div
      className="jp-vgpu-DeviceBar"
      role="img"
      aria-label={label}
      title={label}
    >
      {slices.map(slice => (
        <DeviceBarSlice
          key={slice.id}
          slice={slice}
          uuid={device.uuid}
          total={total}
          colour={colour(slice.id)}
          highlighted={highlighted === slice.id}
          onHover={onHover}
        />
      ))}
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

/**
 * One slice's part of a GPU's bar: its reservation, the use within it solid. An elastic slice's
 * part grows by its burst (its use above its request, within its limit), hatched in its colour
 * (in the warning colour while the server asks it back), as its row's bar draws it.
 */
function DeviceBarSlice(props: {
  slice: ISlice;
  uuid: string;
  total: number;
  colour: number;
  highlighted: boolean;
  onHover?: (sliceId: string | null) => void;
}): JSX.Element {
  const { slice, total, onHover } = props;
  const used = usedOn(slice, props.uuid);
  const elastic = elasticOf(slice, used);
  const burst = elastic ? burstWithinLimit(elastic) : 0;
  const givingBack = burst > 0 && !!slice.burst_notice;
  const reserved = slice.memory_reserved ?? 0;
  const held = reserved + burst;
  const who = holderLabel(slice);
  const then =
    slice.holder_kind === 'command'
      ? 'a command keeps it until it ends'
      : givingBack
        ? 'asked back now for a request that waits'
        : 'given back when a request waits';
  const title = elastic
    ? `${who}: ${formatBytes(used)} used of ${formatBytes(reserved)} requested, up to ${formatBytes(elastic.limit)}` +
      (burst > 0 ? `; ${formatBytes(burst)} above the request (${then})` : '')
    : `${who}: ${formatBytes(used)} used of ${formatBytes(slice.memory_reserved)} reserved`;
  return (
    <div
      className={
        `jp-vgpu-DeviceBar-slice jp-vgpu-colour-${props.colour} jp-vgpu-mod-${slice.state}` +
        (elastic ? ' jp-vgpu-mod-elastic' : '') +
        (burst > 0 ? ' jp-vgpu-mod-bursting' : '') +
        (givingBack ? ' jp-vgpu-mod-givingBack' : '') +
        (props.highlighted ? ' jp-vgpu-mod-highlighted' : '')
      }
      data-slice-id={slice.id}
      onMouseEnter={() => onHover?.(slice.id)}
      onMouseLeave={() => onHover?.(null)}
      style={{ width: percent(share(held, total)) }}
      title={title}
    >
      <div
        className="jp-vgpu-DeviceBar-used"
        style={{
          width: percent(
            share(elastic ? Math.min(used ?? 0, reserved) : used, held)
          )
        }}
      />
      {burst > 0 && (
        <div
          className="jp-vgpu-DeviceBar-burst"
          style={{ width: percent(share(burst, held)) }}
          title={`${who}: ${formatBytes(burst)} above its ${formatBytes(reserved)} request, up to ${formatBytes(elastic?.limit)} (${then})`}
        />
      )}
    </div>
  );
}

/**
 * A slice's own bar: used against reserved, coloured like its segment in the GPU bar. The
 * outlined track is the reservation, empty until the slice uses memory; the solid fill is what
 * it uses; use beyond the reservation grows the bar with a hatched part in the error colour.
 */
export function SliceBar(props: {
  slice: ISlice;
  colour: number;
}): JSX.Element {
  const { slice, colour } = props;
  const elastic = elasticOf(slice);
  if (elastic) {
    return (
      <ElasticBar
        elastic={elastic}
        state={slice.state}
        colour={colour}
        givingBack={!!slice.burst_notice}
      />
    );
  }
  const used = usedPerGPU(slice);
  const parts = usedOfReserved(used, slice.memory_reserved);
  const over = parts.over > 0;
  const text =
    used === null
      ? `use unknown of ${formatBytes(slice.memory_reserved)} reserved`
      : `${formatUsage(used, slice.memory_reserved)} used of reserved` +
        (over
          ? `, ${formatBytes(used - (slice.memory_reserved ?? 0))} over the reservation`
          : '');
  return (
    <div
      className={`jp-vgpu-SliceBar jp-vgpu-colour-${colour} jp-vgpu-mod-${slice.state}${over ? ' jp-vgpu-mod-overflow' : ''}`}
      role="meter"
      aria-valuemin={0}
      aria-valuemax={slice.memory_reserved ?? undefined}
      aria-valuenow={used ?? undefined}
      aria-valuetext={text}
      aria-label="GPU memory used of reserved"
    >
      <div
        className="jp-vgpu-SliceBar-used"
        style={{ width: percent(parts.used / 100) }}
      />
      {over && (
        <div
          className="jp-vgpu-SliceBar-over"
          style={{ width: percent(parts.over / 100) }}
        />
      )}
    </div>
  );
}

/**
 * An elastic slice's bar: the outlined track is its limit, a mark where its request (the
 * guarantee) ends; use within the request is solid, the burst above it hatched in the kernel's
 * colour (in the warning colour while the server asks it back: `givingBack`), and use beyond the
 * limit hatched in the error colour as a fixed slice's overflow.
 */
function ElasticBar(props: {
  elastic: IElastic;
  state: ISlice['state'];
  colour: number;
  givingBack: boolean;
}): JSX.Element {
  const { elastic, state, colour } = props;
  const parts = elasticParts(elastic);
  const bursting = parts.burst > 0;
  const givingBack = bursting && props.givingBack;
  const over = parts.over > 0;
  const used = elastic.used;
  const text =
    (used === null ? 'use unknown' : `${formatBytes(used)} used`) +
    ` of up to ${formatBytes(elastic.limit)}, ${formatBytes(elastic.request)} guaranteed` +
    (bursting
      ? `, bursting ${formatBytes(elastic.burst)} above the request${givingBack ? ', asked back' : ''}`
      : '') +
    (over && used !== null
      ? `, ${formatBytes(used - elastic.limit)} over the limit`
      : '');
  return (
    <div
      className={`jp-vgpu-SliceBar jp-vgpu-mod-elastic jp-vgpu-colour-${colour} jp-vgpu-mod-${state}${bursting ? ' jp-vgpu-mod-bursting' : ''}${givingBack ? ' jp-vgpu-mod-givingBack' : ''}${over ? ' jp-vgpu-mod-overflow' : ''}`}
      role="meter"
      aria-valuemin={0}
      aria-valuemax={elastic.limit}
      aria-valuenow={used ?? undefined}
      aria-valuetext={text}
      aria-label="GPU memory used of the limit, the request guaranteed"
    >
      <div
        className="jp-vgpu-SliceBar-used"
        style={{ width: percent(parts.solid / 100) }}
      />
      {bursting && (
        <div
          className="jp-vgpu-SliceBar-burst"
          style={{ width: percent(parts.burst / 100) }}
          title={
            givingBack
              ? `Burst: ${formatBytes(elastic.burst)} above the request, asked back for someone who needs it`
              : undefined
          }
        />
      )}
      {over && (
        <div
          className="jp-vgpu-SliceBar-over"
          style={{ width: percent(parts.over / 100) }}
        />
      )}
      <div
        className="jp-vgpu-SliceBar-request"
        style={{ left: percent(parts.requestAt / 100) }}
        title={`Request: ${formatBytes(elastic.request)} guaranteed`}
        aria-hidden="true"
      />
      {over && (
        <div
          className="jp-vgpu-SliceBar-limit"
          style={{ left: percent(parts.limitAt / 100) }}
          title={`Limit: ${formatBytes(elastic.limit)}`}
          aria-hidden="true"
        />
      )}
    </div>
  );
}

/**
 * How to read the bars, once at the top of the panel: used (solid), reserved (pale), other
 * processes (hatched), free (empty); with an elastic slice in the panel (`elastic`), its burst
 * (hatched in its colour) and the mark where its request ends.
 */
export function BarLegend(props: { elastic?: boolean }): JSX.Element {
  const items: LegendKey[] = [
    [
      'used',
      'used',
      "Memory a slice's processes use: solid, in the kernel's colour"
    ],
    ['reserved', 'reserved', 'Memory a slice reserves but does not use: pale'],
    [
      'foreign',
      'other processes',
      'Memory used by processes without a slice: hatched'
    ],
    [
      'free',
      'free',
      'Memory neither reserved nor used, which a new slice can reserve: empty'
    ]
  ];
  if (props.elastic) {
    items.splice(
      2,
      0,
      [
        'burst',
        'burst',
        "Burst above request, given back when a request waits: what an elastic slice uses above its request, up to its limit, hatched in the kernel's colour (a command keeps its burst until it ends)"
      ],
      [
        'request',
        'request',
        "Where an elastic slice's request ends on its bar: the memory guaranteed to it; the bar goes on to its limit"
      ]
    );
  }
  return <Legend keys={items} label="How to read the memory bars" />;
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
