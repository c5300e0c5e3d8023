/**
 * An elastic slice (issue 42) in words and in parts of its bar: a request, booked and
 * guaranteed, and a limit it may burst to. A slice without a limit has none of this.
 */
import { ISlice } from '../store/api';

import { formatBytes } from './units';
import { usedOn, usedPerGPU } from './usage';

/** What an elastic slice holds on one of its GPUs, in bytes. */
export interface IElastic {
  /** The request: booked and guaranteed (`memory_reserved`). */
  request: number;
  /**
   * The limit, the whole footprint it may burst to: `memory_burst_limit` (what frameworks may
   * grow to) plus the context allowance, as `memory_reserved` is the request's whole footprint.
   * So a 1/4 GPU slice "up to 1/2" of a 16 GiB GPU reads "up to 8.0 GiB", as asked.
   */
  limit: number;
  /** What it uses (null: not known). */
  used: number | null;
  /** What it uses above its request (0 within it). */
  burst: number;
}

/**
 * The request and limit of an elastic slice; null for a fixed one (no `memory_burst_limit`).
 * `used` is what it uses on the GPU shown (by default an even share of its use on all of them).
 */
export function elasticOf(
  slice: ISlice,
  used: number | null = usedPerGPU(slice)
): IElastic | null {
  const burstLimit = slice.memory_burst_limit;
  if (burstLimit === null || burstLimit === undefined) {
    return null;
  }
  const request = slice.memory_reserved ?? 0;
  const limit = Math.max(request, burstLimit + (slice.context_allowance ?? 0));
  return {
    request,
    limit,
    used,
    burst: used === null ? 0 : Math.max(0, used - request)
  };
}

/**
 * "6.1 GiB of up to 8.0 GiB (4.0 GiB guaranteed)": the row's figure of an elastic slice, each
 * size as `formatBytes` reads it.
 */
export function elasticUsageText(elastic: IElastic): string {
  return (
    `${formatBytes(elastic.used)} of up to ${formatBytes(elastic.limit)}` +
    ` (${formatBytes(elastic.request)} guaranteed)`
  );
}

/**
 * "GPU 6.1 GiB of up to 8.0 GiB": the status bar's words, what the kernel uses of what it may
 * grow to, as the row reads it (its tooltip says the request guaranteed). "6.1 / 4.0 GiB, up to
 * 8.0 GiB" read as twice the slice (issue 49).
 */
export function elasticStatusText(elastic: IElastic): string {
  return `GPU ${formatBytes(elastic.used)} of up to ${formatBytes(elastic.limit)}`;
}

/**
 * The request, the limit and the burst, one sentence: "Request 4.0 GiB (guaranteed), limit
 * 8.0 GiB: bursting 2.1 GiB above its request." (or "within its request").
 */
export function elasticSentence(elastic: IElastic): string {
  const where =
    elastic.used === null
      ? 'its use is not known yet'
      : elastic.burst > 0
        ? `bursting ${formatBytes(elastic.burst)} above its request`
        : 'within its request';
  return `Request ${formatBytes(elastic.request)} (guaranteed), limit ${formatBytes(elastic.limit)}: ${where}.`;
}

/**
 * An elastic slice's bar, in percent of the bar: the use within the request (`solid`), the
 * burst above it (`burst`, hatched), use beyond the limit (`over`), and where the request
 * (`requestAt`) and the limit (`limitAt`) end. The bar is the limit; beyond it, what is used.
 */
export function elasticParts(elastic: IElastic): {
  solid: number;
  burst: number;
  over: number;
  requestAt: number;
  limitAt: number;
} {
  const used =
    elastic.used === null || !isFinite(elastic.used)
      ? 0
      : Math.max(0, elastic.used);
  const scale = Math.max(elastic.limit, used);
  if (!(scale > 0)) {
    return { solid: 0, burst: 0, over: 0, requestAt: 100, limitAt: 100 };
  }
  const pct = (bytes: number) => (bytes / scale) * 100;
  return {
    solid: pct(Math.min(used, elastic.request)),
    burst: pct(Math.max(0, Math.min(used, elastic.limit) - elastic.request)),
    over: pct(Math.max(0, used - elastic.limit)),
    requestAt: pct(elastic.request),
    limitAt: pct(elastic.limit)
  };
}

/**
 * What an elastic slice holds above its request within its limit: its burst as the server counts
 * it (`memory_burst`). Use beyond the limit is over-use, not burst.
 */
export function burstWithinLimit(elastic: IElastic): number {
  const used = elastic.used;
  return used === null || !isFinite(used)
    ? 0
    : Math.max(0, Math.min(used, elastic.limit) - elastic.request);
}

/** What elastic slices hold above their requests on one GPU: kernels' apart from commands'. */
export interface IBurstsHeld {
  /** Given back when a request waits for the memory. */
  kernels: number;
  /** A command's burst is its own until it ends. */
  commands: number;
}

/**
 * The bursts of `slices` on the GPU `uuid`, each slice's use there (`usedOn`) against its
 * request and limit: the part of the GPU's `memory_over_use` that is bursts, not over-use.
 */
export function burstsOn(slices: ISlice[], uuid: string): IBurstsHeld {
  const held: IBurstsHeld = { kernels: 0, commands: 0 };
  for (const slice of slices) {
    const elastic = elasticOf(slice, usedOn(slice, uuid));
    if (elastic) {
      held[slice.holder_kind === 'command' ? 'commands' : 'kernels'] +=
        burstWithinLimit(elastic);
    }
  }
  return held;
}

/**
 * "2.0 GiB held above requests by bursting kernels (given back when a request waits)", and
 * commands' apart ("theirs until they end"), as the server's refusals say it; none without bursts.
 */
export function burstsHeldText(held: IBurstsHeld): string[] {
  const lines: string[] = [];
  if (held.kernels > 0) {
    lines.push(
      `${formatBytes(held.kernels)} held above requests by bursting kernels (given back when a request waits)`
    );
  }
  if (held.commands > 0) {
    lines.push(
      `${formatBytes(held.commands)} held above requests by bursting commands (theirs until they end)`
    );
  }
  return lines;
}

/**
 * An over-full GPU (`memory_overbooked`), as `jupyter vgpu status` says it: "Over-full: bursts
 * hold 1.0 GiB that requests booked; the youngest are asked back"; '' when it is not.
 */
export function overbookedText(overbooked: number | null | undefined): string {
  return overbooked && overbooked > 0
    ? `Over-full: bursts hold ${formatBytes(overbooked)} that requests booked; the youngest are asked back`
    : '';
}
