/**
 * Kernels that run as Slurm jobs (issue 32, "Views on the login node"): the panel's "Slurm jobs"
 * card (a running job's id, node, GPU, shards and fraction, state and reported use; a pending
 * one's reason and place, and Cancel), kept out of this server's GPU cards and line; the login
 * node without a GPU says where its GPU kernels run; the status bar's words and tooltips.
 */
import { KernelSpec } from '@jupyterlab/services';
import * as React from 'react';

import { IDevice, ISlice, IWaiting } from '../store/api';
import {
  slurmJobText,
  slurmPlaceText,
  slurmReasonText,
  slurmWaitingText,
  slurmWaitingTitle,
  statusText,
  statusTitle
} from '../format/format';
import { slurmKernelNames } from '../store/kernelspecs';
import { GPUModel } from '../store/model';
import { Body } from '../sidebar/sidebar';
import { ISliceActions } from '../sidebar/slicerow';
import { SlurmJobs } from '../sidebar/slurmjobs';
import { IWaitingActions } from '../sidebar/waiting';
import { makeDevice, makeSlice, makeWaiter } from './fixtures';
import { attr, render, tags, texts } from './render';

jest.mock('@jupyterlab/ui-components', () =>
  jest.requireActual('./mocks').uiComponents()
);
jest.mock('../icons', () => jest.requireActual('./mocks').icons());
jest.mock('@jupyterlab/apputils', () => ({
  Clipboard: {},
  Dialog: {},
  showDialog: jest.fn(),
  Notification: { info: jest.fn(), success: jest.fn(), warning: jest.fn() }
}));

const GiB = 1024 ** 3;

/** A kernel running in Slurm job 12 on node1's GPU 0, as `GET /api/vgpu/slices` sends it. */
function runningJob(fields: Partial<ISlice> = {}): ISlice {
  return makeSlice({
    id: 'slurm-12',
    kernel_id: 'k-train',
    kernel_display_name: 'Python 3 (1/4 GPU, Slurm)',
    path: 'work/train.ipynb',
    owner: null,
    pid: null,
    job_id: '12',
    node: 'node1',
    partition: 'gpu',
    gpus: ['slurm:node1:0'],
    gpu_indices: [0],
    fraction: 0.25,
    shards: 8,
    shards_per_gpu: 32,
    share_text: '8/32 shards (1/4 GPU)',
    request_text: '1/4 GPU: 8 of 32 shards',
    slurm_state: 'RUNNING',
    slurm_reason: null,
    memory_reserved: 4 * GiB,
    memory_used: 1.5 * GiB,
    usage_source: 'reported',
    usage_note:
      'Reported by the kernel itself, from node1: what its frameworks say they hold.',
    tier: 'Slurm job 12 on node1 (shards fence nothing: cooperative limits)',
    state: 'ok',
    created: 10,
    ...fields
  });
}

/** A kernel whose Slurm job 13 is pending, as the reply's `waiting` has it. */
function pendingJob(fields: Partial<IWaiting> = {}): IWaiting {
  return makeWaiter({
    ticket: 'slurm-13',
    position: 1,
    holder: 'k-queued',
    kernel_id: 'k-queued',
    path: 'work/queued.ipynb',
    kernel_display_name: 'Python 3 (1/4 GPU, Slurm)',
    request_text: '1/4 GPU: 8 of 32 shards',
    waiting_seconds: 42,
    job_id: '13',
    partition: 'gpu',
    slurm_state: 'PENDING',
    slurm_reason: 'Resources',
    slurm_reason_text: 'no node has the GPU shards free now',
    shards: 8,
    shards_per_gpu: 32,
    share_text: '8/32 shards (1/4 GPU)',
    ...fields
  });
}

const actions: ISliceActions = {
  openNotebook: () => undefined,
  kernelDisplayName: s => s.kernel_display_name ?? 'kernel',
  shutdownKernel: () => undefined,
  releaseSlice: () => undefined,
  copySliceId: () => undefined,
  keepSlice: () => undefined
};
const waitingActions: IWaitingActions = {
  cancel: () => undefined,
  openNotebook: () => undefined
};

function jobs(running: ISlice[], waiting: IWaiting[]): string {
  return render(
    <SlurmJobs
      jobs={running}
      waiting={waiting}
      taken={Date.now()}
      colour={() => 1}
      actions={actions}
      waitingActions={waitingActions}
    />
  );
}

describe('the words for a Slurm job', () => {
  it('say where a running job is and what it holds', () => {
    expect(slurmJobText(runningJob())).toBe(
      'Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)'
    );
    expect(
      slurmJobText(
        runningJob({ gpu_indices: [0, 1], shards: null, share_text: '2 GPUs' })
      )
    ).toBe('Slurm job 12 on node1 · GPUs 0, 1 · 2 GPUs');
  });

  it('say no node for a pending job, and its reason in words where the server knows them', () => {
    expect(slurmJobText(pendingJob())).toBe(
      'Slurm job 13 · 8/32 shards (1/4 GPU)'
    );
    expect(slurmReasonText(pendingJob())).toBe(
      'Resources: no node has the GPU shards free now'
    );
    expect(
      slurmReasonText(
        pendingJob({ slurm_reason: 'BeginTime', slurm_reason_text: null })
      )
    ).toBe('BeginTime');
    expect(slurmReasonText(pendingJob({ slurm_reason: null }))).toBe(
      'no reason given yet'
    );
    expect(slurmPlaceText(pendingJob({ position: 2 }))).toBe(
      "place 2 in partition gpu's queue"
    );
    expect(slurmPlaceText(pendingJob({ position: 2, partition: null }))).toBe(
      "place 2 in Slurm's queue"
    );
  });
});

describe('the status bar item of a Slurm kernel', () => {
  it('says its use of the job share and where it runs', () => {
    expect(statusText(runningJob())).toBe(
      'GPU 1.5 / 4.0 GiB · Slurm job 12 on node1'
    );
    expect(statusText(runningJob({ memory_used: null }))).toBe(
      'GPU – / 4.0 GiB · Slurm job 12 on node1'
    );
    // Before the kernel has said its budget from its node.
    expect(
      statusText(runningJob({ memory_reserved: null, memory_used: null }))
    ).toBe('GPU: Slurm job 12 on node1');
    expect(statusText(runningJob({ memory_reserved: null }))).toBe(
      'GPU 1.5 GiB · Slurm job 12 on node1'
    );
  });

  it('has a tooltip about its job, never about this server (simulated) GPUs', () => {
    const lines = statusTitle(runningJob(), null, true).split('\n');
    expect(lines[0]).toBe(
      'Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU).'
    );
    expect(lines).toContain("1.5 / 4.0 GiB used of the job's share.");
    expect(lines).toContain(
      'Reported by the kernel itself, from node1: what its frameworks say they hold.'
    );
    expect(lines.join('\n')).not.toMatch(/simulated/i);
  });

  it('says a pending job, its reason and place', () => {
    const w = pendingJob();
    expect(slurmWaitingText(w)).toBe(
      'GPU: Slurm job 13 pending (Resources) · place 1'
    );
    expect(slurmWaitingTitle(w, '42 s').split('\n')).toEqual([
      "queued.ipynb waits in Slurm's queue for 8/32 shards (1/4 GPU): job 13 is pending.",
      "Slurm's reason: Resources: no node has the GPU shards free now.",
      "It is at place 1 in partition gpu's queue, waiting 42 s; it starts on the node Slurm places it on."
    ]);
  });
});

describe('the Slurm jobs card', () => {
  it('shows a running job: notebook, state, job, node, GPU, shards and fraction, reported use', () => {
    const html = jobs([runningJob()], []);
    expect(texts(html, 'jp-vgpu-Slurm-title')[0]).toBe('Slurm jobs 1');
    const [row] = tags(html, 'li', 'jp-vgpu-SlurmRow');
    expect(attr(row, 'data-job-id')).toBe('12');
    expect(attr(row, 'class')).toContain('jp-vgpu-mod-running');
    expect(texts(html, 'jp-vgpu-SliceRow-holder')).toEqual(['train.ipynb']);
    expect(texts(html, 'jp-vgpu-SlurmRow-kernel')).toEqual([
      'Python 3 (1/4 GPU, Slurm)'
    ]);
    expect(texts(html, 'jp-vgpu-SlurmRow-state')).toEqual(['running']);
    expect(texts(html, 'jp-vgpu-SlurmRow-job')).toEqual([
      'Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)'
    ]);
    expect(texts(html, 'jp-vgpu-SlurmRow-use')).toEqual(['1.5 / 4.0 GiB']);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar')).toHaveLength(1);
    expect(tags(html, 'button', 'jp-vgpu-action-shutdown')).toHaveLength(1);
    expect(tags(html, 'p', 'jp-vgpu-SliceRow-note')).toHaveLength(0);
  });

  it("says a use not yet reported, and no bar before the job's budget is known", () => {
    const note =
      'No use reported yet: the kernel reports from node1 what its frameworks hold once they use the GPU.';
    const html = jobs(
      [
        runningJob({
          memory_used: null,
          memory_reserved: null,
          state: 'unknown',
          usage_note: note
        })
      ],
      []
    );
    expect(texts(html, 'jp-vgpu-SlurmRow-use')).toEqual([
      'use not reported yet'
    ]);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar')).toHaveLength(0);
    expect(texts(html, 'jp-vgpu-SliceRow-note')).toEqual([note]);
  });

  it('says why Slurm ended the job a restarted kernel ran in', () => {
    const ended =
      "Slurm ended this kernel's job 11: its time limit was reached (TIMEOUT). This kernel was restarted in job 12: variables were lost.";
    expect(
      texts(
        jobs([runningJob({ slurm_ended: ended })], []),
        'jp-vgpu-SlurmRow-ended'
      )
    ).toEqual([ended]);
  });

  it('shows a job whose kernel was shut down but whose cancel Slurm has not confirmed as ending, with Cancel', () => {
    const ending =
      'Shut down 40 s ago, but Slurm has not confirmed the cancel of job 12 (Slurm does not answer); it still holds its GPU share, and its cancel is tried again every 5 s.';
    const cancelled: string[] = [];
    const html = render(
      <SlurmJobs
        jobs={[runningJob({ ending, running_here: false })]}
        waiting={[]}
        taken={Date.now()}
        colour={() => 1}
        actions={{ ...actions, cancelJob: job => cancelled.push(job.id) }}
        waitingActions={waitingActions}
      />
    );
    const [row] = tags(html, 'li', 'jp-vgpu-SlurmRow');
    expect(attr(row, 'class')).toContain('jp-vgpu-mod-ending');
    expect(attr(row, 'aria-label')).toMatch(/, ending$/);
    expect(texts(html, 'jp-vgpu-SlurmRow-state')).toEqual(['ending']);
    expect(texts(html, 'jp-vgpu-SlurmRow-ending')).toEqual([ending]);
    const [cancel] = tags(html, 'button', 'jp-vgpu-SlurmRow-cancel');
    expect(attr(cancel, 'aria-label')).toBe('Cancel Slurm job 12');
    expect(tags(html, 'button', 'jp-vgpu-action-shutdown')).toHaveLength(0);
    // Without the action (an older panel) there is no button that would do nothing.
    expect(
      tags(
        jobs([runningJob({ ending, running_here: false })], []),
        'button',
        'jp-vgpu-SlurmRow-cancel'
      )
    ).toHaveLength(0);
  });

  it('says a kernel runs unfenced, and why', () => {
    const unfenced =
      "JUPYTER_VGPU_CONTEXT_ALLOWANCE 'lots' is not a size. The kernel runs with the job's GPUs, unfenced: its frameworks are not fitted to the share.";
    const html = jobs([runningJob({ unfenced })], []);
    expect(texts(html, 'jp-vgpu-SlurmRow-unfenced')).toEqual([
      `Unfenced: ${unfenced}`
    ]);
    expect(texts(html, 'jp-vgpu-SlurmRow-state')).toEqual(['running']);
  });

  it("shows a pending job with Slurm's reason in words, its place, and Cancel for your own", () => {
    const html = jobs([], [pendingJob()]);
    const [row] = tags(html, 'li', 'jp-vgpu-SlurmRow');
    expect(attr(row, 'class')).toContain('jp-vgpu-mod-pending');
    expect(attr(row, 'data-job-id')).toBe('13');
    expect(texts(html, 'jp-vgpu-Waiting-place')).toEqual(['#1']);
    expect(texts(html, 'jp-vgpu-Waiting-holder')).toEqual(['queued.ipynb']);
    expect(texts(html, 'jp-vgpu-SlurmRow-state')).toEqual(['pending']);
    expect(texts(html, 'jp-vgpu-SlurmRow-job')).toEqual([
      'Slurm job 13 · 8/32 shards (1/4 GPU)'
    ]);
    expect(texts(html, 'jp-vgpu-SlurmRow-why')).toEqual([
      'Resources: no node has the GPU shards free now'
    ]);
    expect(texts(html, 'jp-vgpu-SlurmRow-place')[0]).toMatch(
      /^Place 1 in partition gpu's queue · waiting 4[2-9] s$/
    );
    expect(tags(html, 'button', 'jp-vgpu-Waiting-cancel')).toHaveLength(1);
    expect(
      tags(
        jobs([], [pendingJob({ yours: false })]),
        'button',
        'jp-vgpu-Waiting-cancel'
      )
    ).toHaveLength(0);
  });

  it('lists running jobs by node, then pending ones in their place, and says how many wait', () => {
    const html = jobs(
      [
        runningJob({ id: 'slurm-20', job_id: '20', node: 'node2', created: 1 }),
        runningJob({ id: 'slurm-12', job_id: '12', node: 'node1', created: 5 })
      ],
      [
        pendingJob({
          ticket: 'slurm-15',
          job_id: '15',
          position: 2,
          slurm_reason: 'Priority',
          slurm_reason_text: 'jobs ahead of it come first'
        }),
        pendingJob()
      ]
    );
    expect(
      tags(html, 'li', 'jp-vgpu-SlurmRow').map(t => attr(t, 'data-job-id'))
    ).toEqual(['12', '20', '13', '15']);
    expect(texts(html, 'jp-vgpu-Slurm-title')[0]).toBe('Slurm jobs 42 pending');
    expect(texts(html, 'jp-vgpu-SlurmRow-why')).toEqual([
      'Resources: no node has the GPU shards free now',
      'Priority: jobs ahead of it come first'
    ]);
  });

  it('is not there without Slurm jobs', () => {
    expect(jobs([], [])).toBe('');
  });
});

/** The panel's body for a snapshot of this server: its GPUs (none: a login node), slices and line. */
function body(
  options: {
    devices?: IDevice[];
    slices?: ISlice[];
    waiting?: IWaiting[];
    slurmKernels?: string[];
  } = {}
): string {
  const devices = options.devices ?? [];
  const model = {
    snapshot: {
      devices: {
        simulated: devices.length > 0,
        available: devices.length > 0,
        message: devices.length
          ? null
          : 'No NVIDIA GPU is available here (NVML: NVML Shared Library Not Found).',
        driver: '',
        interval: 1,
        devices
      },
      slices: {
        simulated: false,
        interval: 1,
        slices: options.slices ?? [],
        waiting: options.waiting ?? []
      },
      taken: Date.now()
    },
    error: null,
    colour: () => 2,
    refresh: () => Promise.resolve()
  } as unknown as GPUModel;
  return render(
    <Body
      model={model}
      actions={actions}
      waitingActions={waitingActions}
      history={{ slice: () => [], device: () => [], now: () => 0 }}
      slurmKernels={options.slurmKernels ?? []}
    />
  );
}

describe('the panel on a login node', () => {
  it('says where GPU kernels run instead of "Kernels run on the CPU", and lists the jobs', () => {
    const html = body({
      slices: [runningJob()],
      waiting: [pendingJob()],
      slurmKernels: ['Python 3 (1/4 GPU, Slurm)']
    });
    expect(texts(html, 'jp-vgpu-Message-title')).toEqual([
      'No GPU on this server.'
    ]);
    expect(texts(html, 'jp-vgpu-Message-detail')).toEqual([
      "Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them: start “Python 3 (1/4 GPU, Slurm)” from the launcher."
    ]);
    expect(html).not.toContain('Kernels run on the CPU');
    expect(tags(html, 'li', 'jp-vgpu-SlurmRow')).toHaveLength(2);
    // A pending job is in the Slurm card, not in jupyter-vgpu's own line.
    expect(tags(html, 'section', 'jp-vgpu-Waiting')).toHaveLength(0);
  });

  it('says so before any Slurm kernel started, and names two kernelspecs at most', () => {
    const html = body({
      slurmKernels: ['A (Slurm)', 'B (Slurm)', 'C (Slurm)']
    });
    expect(texts(html, 'jp-vgpu-Message-detail')[0]).toBe(
      "Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them: start “A (Slurm)”, “B (Slurm)” or 1 more from the launcher."
    );
    expect(tags(html, 'section', 'jp-vgpu-Slurm')).toHaveLength(0);
  });

  it('keeps its CPU message where no kernel runs on Slurm', () => {
    const html = body();
    expect(texts(html, 'jp-vgpu-Message-detail')).toEqual([
      'No NVIDIA GPU is available here (NVML: NVML Shared Library Not Found).',
      'Kernels run on the CPU. To try jupyter-vgpu anyway, start the server with JUPYTER_VGPU_SIMULATE=2x16GiB.'
    ]);
  });
});

describe('the panel of a server with GPUs of its own and Slurm kernels', () => {
  it("keeps a job off this server's GPU of the same index, and its own slices and line as they were", () => {
    const local = makeSlice({ id: 'local', path: 'work/here.ipynb' });
    const html = body({
      devices: [makeDevice(0)],
      slices: [local, runningJob()],
      waiting: [makeWaiter({ path: 'work/line.ipynb' }), pendingJob()]
    });
    const card = html.slice(
      html.indexOf('jp-vgpu-DeviceCard'),
      html.indexOf('jp-vgpu-Slurm"')
    );
    expect(
      tags(card, 'li', 'jp-vgpu-SliceRow').map(t => attr(t, 'data-slice-id'))
    ).toEqual(['local']);
    expect(
      tags(html, 'li', 'jp-vgpu-SlurmRow').map(t => attr(t, 'data-job-id'))
    ).toEqual(['12', '13']);
    expect(texts(html, 'jp-vgpu-Waiting-title')).toEqual([
      'Slurm jobs 21 pending',
      'Waiting for a slice 1'
    ]);
    expect(texts(html, 'jp-vgpu-Waiting-holder')).toEqual([
      'queued.ipynb',
      'line.ipynb'
    ]);
    expect(html).not.toContain('No kernel holds a GPU slice');
  });
});

describe('slurmKernelNames', () => {
  function spec(name: string, config: object | null): KernelSpec.ISpecModel {
    return {
      name,
      display_name: name,
      language: 'python',
      argv: [],
      resources: {},
      metadata: config
        ? {
            kernel_provisioner: { provisioner_name: 'vgpu-provisioner', config }
          }
        : {}
    } as unknown as KernelSpec.ISpecModel;
  }

  it('names the kernelspecs whose kernels run as Slurm jobs', () => {
    const kernelspecs = {
      python3: spec('Python 3', null),
      local: spec('Python 3 (1/4 GPU)', { gpu_fraction: 0.25 }),
      slurm: spec('Python 3 (1/4 GPU, Slurm)', {
        gpu_fraction: 0.25,
        launcher: 'slurm'
      })
    };
    expect(slurmKernelNames({ default: 'python3', kernelspecs })).toEqual([
      'Python 3 (1/4 GPU, Slurm)'
    ]);
    expect(slurmKernelNames(null)).toEqual([]);
  });
});
