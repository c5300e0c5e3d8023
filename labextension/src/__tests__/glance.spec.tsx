/**
 * What a newcomer's second hour found (issue 33), in the pure parts: a resized slice's kernel
 * name, whether a kernelspec fits now, a command's name in the line, the host at a glance, the
 * timeline's lanes, stable colours, and the words for new kernelspecs.
 */
import { KernelSpec } from '@jupyterlab/services';
import * as React from 'react';

import { IDevice } from '../store/api';
import { PALETTE_SIZE, preferredColour, SliceColours } from '../store/colours';
import {
  hostGlance,
  machineGlance,
  statusTitle,
  waiterLabel
} from '../format/format';
import { IEndedSlice, ISliceHistory } from '../store/historyapi';
import { kernelspecFit } from '../store/kernelspecs';
import { newKernelText } from '../store/kernelspecwatch';
import { stopReason } from '../notes/monitorstops';
import { isResized, sliceKernelName } from '../store/resized';
import { lanes, SliceTimeline } from '../dashboard/timeline';
import { makeSlice, makeWaiter } from './fixtures';
import { slice as historySlice } from './historyfixtures';
import { render, tags, texts } from './render';

jest.mock('@jupyterlab/apputils', () => ({
  Notification: { info: jest.fn() }
}));

const GiB = 1024 ** 3;

function spec(
  config: { [key: string]: unknown } | null,
  display_name = 'Python 3 (1/4 GPU)'
): KernelSpec.ISpecModel {
  return {
    name: 'python3-vgpu',
    display_name,
    language: 'python',
    argv: [],
    resources: {},
    metadata: config
      ? {
          kernel_provisioner: {
            provisioner_name: 'vgpu-provisioner',
            config
          }
        }
      : {}
  } as unknown as KernelSpec.ISpecModel;
}

function gpu(index: number, free: number, total = 16 * GiB): IDevice {
  return {
    index,
    uuid: `GPU-${index}`,
    name: 'A100',
    memory_total: total,
    memory_used: 0,
    memory_reserved: total - free,
    memory_used_by_slices: 0,
    memory_over_use: 0,
    memory_foreign: 0,
    memory_free: free,
    utilization: 0,
    mig_mode: false,
    tier: 'cooperative',
    slices: []
  };
}

function quarterSpec(): KernelSpec.ISpecModel {
  return spec({ gpu_fraction: 0.25 });
}

describe('a resized slice', () => {
  const quarter = spec({ gpu_fraction: 0.25 });

  it('keeps its kernelspec name while it is the size asked for', () => {
    const slice = makeSlice();
    expect(isResized(slice, quarter)).toBe(false);
    expect(sliceKernelName('Python 3 (1/4 GPU)', slice, quarter)).toEqual({
      name: 'Python 3 (1/4 GPU)',
      resized: false
    });
  });

  it('says the size it has now after %vgpu resize', () => {
    const slice = makeSlice({ fraction: 0.5, request_text: '1/2 GPU' });
    expect(sliceKernelName('Python 3 (1/4 GPU)', slice, quarter)).toEqual({
      name: 'Python 3 (1/2 GPU)',
      resized: true
    });
    const waits = spec({ gpu_fraction: 1, wait_timeout: 300 });
    expect(sliceKernelName('Python 3 (1 GPU, waits)', slice, waits).name).toBe(
      'Python 3 (1/2 GPU, waits)'
    );
    // an amount, and a name that says no size
    const amount = makeSlice({
      fraction: null,
      request_text: '6.0 GiB',
      memory_reserved: 6 * GiB
    });
    expect(sliceKernelName('Python 3 (1/4 GPU)', amount, quarter).name).toBe(
      'Python 3 (6.0 GiB)'
    );
    expect(sliceKernelName('Deep learning', slice, quarter).name).toBe(
      'Deep learning (1/2 GPU)'
    );
    // "3.11" is a version, not a size
    expect(sliceKernelName('Python 3.11 (1/4 GPU)', slice, quarter).name).toBe(
      'Python 3.11 (1/2 GPU)'
    );
  });

  it("says an elastic kernel's request and limit now, both in place of the old (issue 49)", () => {
    const bursty = spec(
      { gpu_memory: '1GiB', gpu_memory_limit: '3GiB' },
      'Python 3 (1 GiB GPU, up to 3 GiB)'
    );
    const same = makeSlice({
      fraction: 1 / 16,
      request: { fraction: null, memory: GiB, gpus: 1, limit_memory: 3 * GiB },
      request_text: '1.0 GiB, up to 3.0 GiB',
      memory_reserved: GiB
    });
    expect(isResized(same, bursty)).toBe(false);
    // %vgpu resize 1/4 --limit 1/2
    const quarterToHalf = makeSlice({
      fraction: 0.25,
      request: { fraction: 0.25, memory: null, gpus: 1, limit_fraction: 0.5 },
      request_text: '1/4 GPU, up to 1/2'
    });
    expect(
      sliceKernelName(
        'Python 3 (1 GiB GPU, up to 3 GiB)',
        quarterToHalf,
        bursty
      )
    ).toEqual({ name: 'Python 3 (1/4 GPU, up to 1/2)', resized: true });
    // %vgpu resize --limit none: the same request, no limit any more
    const fixed = makeSlice({
      fraction: 1 / 16,
      request: { fraction: null, memory: GiB, gpus: 1 },
      request_text: '1.0 GiB',
      memory_reserved: GiB
    });
    expect(isResized(fixed, bursty)).toBe(true);
    expect(
      sliceKernelName('Python 3 (1 GiB GPU, up to 3.0 GiB)', fixed, bursty).name
    ).toBe('Python 3 (1.0 GiB GPU)');
    // a new limit alone, as an amount
    const higher = makeSlice({
      fraction: 1 / 16,
      request: { fraction: null, memory: GiB, gpus: 1, limit_memory: 4 * GiB },
      request_text: '1.0 GiB, up to 4.0 GiB',
      memory_reserved: GiB
    });
    expect(
      sliceKernelName('Python 3 (1 GiB GPU, up to 3 GiB)', higher, bursty).name
    ).toBe('Python 3 (1.0 GiB GPU, up to 4.0 GiB)');
  });

  it('compares amounts as amounts, and guesses from the name without a kernelspec', () => {
    const six = spec({ gpu_memory: '6GiB' }, 'Python 3 (6 GiB)');
    const slice = makeSlice({
      fraction: null,
      request_text: '6.0 GiB',
      memory_reserved: 6 * GiB
    });
    expect(sliceKernelName('Python 3 (6 GiB)', slice, six)).toEqual({
      name: 'Python 3 (6 GiB)',
      resized: false
    });
    // as the server sends it: an amount has a fraction of its GPU too (1 GiB of 16 GiB)
    const oneGiB = spec({ gpu_memory: '1GiB' }, 'Python 3 (1 GiB GPU)');
    const asAmount = makeSlice({
      fraction: 1 / 16,
      request: { fraction: null, memory: GiB, gpus: 1 },
      request_text: '1.0 GiB',
      memory_reserved: GiB
    });
    expect(sliceKernelName('Python 3 (1 GiB GPU)', asAmount, oneGiB)).toEqual({
      name: 'Python 3 (1 GiB GPU)',
      resized: false
    });
    const grown = makeSlice({
      fraction: 1 / 8,
      request: { fraction: null, memory: 2 * GiB, gpus: 1 },
      request_text: '2.0 GiB',
      memory_reserved: 2 * GiB
    });
    expect(sliceKernelName('Python 3 (1 GiB GPU)', grown, oneGiB).name).toBe(
      'Python 3 (2.0 GiB GPU)'
    );
    const toHalf = makeSlice({
      fraction: 0.5,
      request: { fraction: 0.5, memory: null, gpus: 1 },
      request_text: '1/2 GPU'
    });
    expect(sliceKernelName('Python 3 (1 GiB GPU)', toHalf, oneGiB).name).toBe(
      'Python 3 (1/2 GPU)'
    );
    expect(isResized(toHalf, quarterSpec())).toBe(true);
    const half = makeSlice({ fraction: 0.5, request_text: '1/2 GPU' });
    expect(sliceKernelName('Python 3 (1/4 GPU)', half, undefined).name).toBe(
      'Python 3 (1/2 GPU)'
    );
  });
});

describe('kernelspecFit', () => {
  it('fits where a GPU has its share free to reserve', () => {
    const fit = kernelspecFit(spec({ gpu_fraction: 0.25 }), [
      gpu(0, 2 * GiB),
      gpu(1, 12 * GiB)
    ]);
    expect(fit?.fits).toBe(true);
    expect(fit?.short).toBe('fits now');
    expect(fit?.sentence).toBe(
      'Asks for 4.0 GiB on 1 GPU: fits now on GPU 1 (12.0 GiB free to reserve).'
    );
  });

  it('says where the most room is when none fits, and whether it waits', () => {
    const devices = [gpu(0, 2 * GiB), gpu(1, 3 * GiB)];
    const refused = kernelspecFit(spec({ gpu_fraction: 0.5 }), devices);
    expect(refused?.fits).toBe(false);
    expect(refused?.short).toBe('no room now');
    expect(refused?.sentence).toBe(
      'Asks for 8.0 GiB on 1 GPU: no room now (the most free to reserve is 3.0 GiB on GPU 1), so its start would be refused.'
    );
    const waits = kernelspecFit(
      spec({ gpu_fraction: 1, wait_timeout: 300 }),
      devices
    );
    expect(waits?.short).toBe('no room now: waits');
    expect(waits?.sentence).toMatch(/so it waits in line up to 5 min/);
  });

  it('needs as many GPUs as asked, and nothing for a kernelspec without a slice', () => {
    const two = spec({ gpu_fraction: 0.5, gpus: 2 });
    expect(kernelspecFit(two, [gpu(0, 8 * GiB), gpu(1, 2 * GiB)])?.fits).toBe(
      false
    );
    expect(kernelspecFit(two, [gpu(0, 8 * GiB), gpu(1, 8 * GiB)])?.fits).toBe(
      true
    );
    expect(kernelspecFit(spec(null), [gpu(0, 8 * GiB)])).toBeNull();
    expect(kernelspecFit(spec({ gpu_memory: '6GiB' }), [])).toBeNull();
  });
});

describe('the line', () => {
  it('names a waiting command by its program and arguments', () => {
    const w = makeWaiter({
      holder_kind: 'command',
      holder: '/opt/conda/envs/ml/bin/python train.py --epochs 3',
      kernel_id: null
    });
    expect(waiterLabel(w)).toBe('python train.py --epochs 3');
    expect(waiterLabel({ ...w, holder: "another user's command" })).toBe(
      "another user's command"
    );
  });
});

describe('the host at a glance', () => {
  it("reads a kernel's CPU and RAM, and the machine's", () => {
    expect(
      hostGlance({
        cpu_percent: 12.3,
        memory_rss: 310 * 1024 ** 2,
        memory_total: 23 * GiB,
        cpu_count: 16
      })
    ).toBe('CPU 12% · RAM 310 MiB');
    expect(hostGlance(null)).toBeNull();
    expect(
      machineGlance({
        cpu_percent: 23.4,
        cpu_count: 16,
        memory_used: 8.5 * GiB,
        memory_total: 23.5 * GiB
      })
    ).toBe('CPU 23% of 16 cores · RAM 8.5 / 23.5 GiB');
    expect(
      machineGlance({
        cpu_percent: null,
        cpu_count: 4,
        memory_used: null,
        memory_total: null
      })
    ).toBe('CPU – of 4 cores');
  });

  it('does not say "Measured by NVML" of simulated GPUs', () => {
    const slice = makeSlice({
      usage_note: 'Measured by NVML: the memory of this kernel.'
    });
    expect(statusTitle(slice, null, true)).not.toMatch(/NVML/);
    expect(statusTitle(slice, null, true)).toMatch(/simulated/);
    expect(statusTitle(slice, null, false)).toMatch(/Measured by NVML/);
  });
});

describe('the timeline', () => {
  const live: ISliceHistory = {
    ...historySlice('train', []),
    path: 'work/train.ipynb',
    created: 1000
  };
  const short: IEndedSlice = {
    ...live,
    id: 'run1',
    holder_kind: 'command',
    kernel_id: null,
    path: null,
    command: '/usr/bin/python eval.py',
    kernel_display_name: null,
    request_text: '1/2 GPU',
    created: 1500,
    last_seen: 1502,
    ended: 1503,
    memory_peak: GiB
  };

  it('lists live and ended slices oldest first, leaving out what ended before the range', () => {
    const shown = lanes(
      [live],
      [short, { ...short, id: 'old', ended: 10, created: 5 }],
      900,
      1800
    );
    expect(shown.map(l => [l.id, l.name, l.end])).toEqual([
      ['train', 'train.ipynb', null],
      ['run1', 'python eval.py', 1503]
    ]);
  });

  it('draws a 3 s event at least a few pixels wide, in its colour', () => {
    const html = render(
      <SliceTimeline
        gpuIndex={0}
        live={[live]}
        ended={[short]}
        start={0}
        end={3600}
        colour={() => 5}
      />
    );
    const [ended] = tags(html, 'li', 'jp-vgpu-mod-ended');
    expect(ended).toContain('data-slice-id="run1"');
    expect(ended).toContain('jp-vgpu-colour-5');
    expect(texts(html, 'jp-vgpu-Timeline-holder')).toEqual([
      'train.ipynb',
      'python eval.py'
    ]);
    expect(html).toContain('width:max(6px, 0.083%)');
    expect(html).toMatch(/ended; about 3 s/);
  });
});

describe('colours', () => {
  it('come from the slice id, and two live slices never share one', () => {
    const colours = new SliceColours();
    const ids = Array.from({ length: PALETTE_SIZE }, (_, i) => `slice${i}`);
    colours.assign(ids.map((id, i) => ({ id, created: i })));
    expect(new Set(ids.map(id => colours.colour(id))).size).toBe(PALETTE_SIZE);
    expect(colours.colour('never-seen')).toBe(preferredColour('never-seen'));
    expect(preferredColour('3f2a9c01b7de')).toBe(
      preferredColour('3f2a9c01b7de')
    );
  });
});

describe('words', () => {
  it('name new kernelspecs and say where to find them', () => {
    expect(newKernelText(['Python 3 (1/2 GPU)'])).toBe(
      'New kernel “Python 3 (1/2 GPU)”: in the launcher and in Kernel › Change Kernel…'
    );
    expect(stopReason('restarting')).toBe('the kernel restarted');
    expect(stopReason('autorestarting')).toBe('the kernel restarted');
    expect(stopReason('dead')).toBe('the kernel died');
    expect(stopReason('idle')).toBeNull();
  });
});

// React is used by the JSX above.
void React;
