/**
 * The status bar item's words for a kernel's slice, and the GPU node a CPU-only server answers from.
 */
import { IGateway, IHostUsage, ISlice } from '../store/api';

import {
  elasticOf,
  elasticSentence,
  elasticStatusText,
  elasticUsageText
} from './elastic';
import { elsewhereStatusText, elsewhereStatusTitle } from './elsewhere';
import { formatUsage } from './units';
import { formatHost, stateText, usageNote, usedPerGPU } from './usage';

/**
 * What the status bar item says of a kernel's slice: "GPU 2.1 / 4.0 GiB"; of an elastic one,
 * "GPU 6.1 GiB of up to 8.0 GiB" (its tooltip says the request guaranteed).
 */
export function statusText(slice: ISlice): string {
  if (slice.elsewhere) {
    return elsewhereStatusText(slice, slice.elsewhere);
  }
  const elastic = elasticOf(slice);
  if (elastic) {
    return elasticStatusText(elastic);
  }
  return `GPU ${formatUsage(usedPerGPU(slice), slice.memory_reserved)}`;
}

/** The words on simulated GPUs, wherever the UI says so. */
export const SIMULATED_NOTE =
  'The GPUs are simulated (JUPYTER_VGPU_SIMULATE): no real GPU is used.';

/**
 * The status bar item's tooltip: the GPU use and the slice, the kernel's use of the host beside
 * it, a warning, whether the GPUs are simulated.
 */
export function statusTitle(
  slice: ISlice,
  host: IHostUsage | null | undefined,
  simulated: boolean
): string {
  if (slice.elsewhere) {
    // Its GPUs are its launcher's: this server's say nothing of it.
    return elsewhereStatusTitle(slice, slice.elsewhere);
  }
  const elastic = elasticOf(slice);
  const lines = elastic
    ? [
        `GPU ${elasticUsageText(elastic)}: ${slice.request_text}, slice ${slice.id} (${slice.tier})`,
        elasticSentence(elastic)
      ]
    : [
        `${statusText(slice)} used of reserved: ${slice.request_text}, slice ${slice.id} (${slice.tier})`
      ];
  const hostText = formatHost(host);
  if (hostText) {
    lines.push(hostText);
  }
  const note = usageNote(slice);
  if (note && !(simulated && /\bNVML\b/.test(note) && /^Measured/.test(note))) {
    lines.push(note); // an older server's "Measured by NVML" is not true of simulated GPUs
  }
  const warning = stateText(slice);
  if (warning) {
    lines.push(warning);
  }
  if (simulated) {
    lines.push(SIMULATED_NOTE);
  }
  lines.push('Click to show the GPUs panel.');
  return lines.join('\n');
}

/**
 * The GPU node a CPU-only server answers from (`--gateway-url`): "GPU node gpu01
 * (http://gpu01:8890/node)", or "GPU node <url>" when the node does not name itself.
 */
export function gatewayText(gateway: IGateway): string {
  return gateway.node
    ? `GPU node ${gateway.node} (${gateway.url})`
    : `GPU node ${gateway.url}`;
}
