/**
 * Rows of kernels that run elsewhere, as `GET /api/vgpu/slices` sends them (Slurm's, in the slurm
 * launcher's words), and the card and panel they are rendered in, for elsewhere*.spec.tsx.
 */
import * as React from 'react';

import {
  IDevice,
  IElsewhere,
  ILauncherInfo,
  ISlice,
  IWaiting
} from '../store/api';
import { GPUModel } from '../store/model';
import { Body } from '../sidebar/sidebar';
import { ISliceActions } from '../sidebar/slicerow';
import { ElsewhereCards } from '../sidebar/elsewhere';
import { IWaitingActions } from '../sidebar/waiting';
import { makeSlice, makeWaiter } from './fixtures';
import { render } from './render';

const GiB = 1024 ** 3;

export const SLURM: ILauncherInfo = {
  name: 'slurm',
  title: 'Slurm jobs',
  runs: "Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them",
  kernelspecs: ['Python 3 (1/4 GPU, Slurm)']
};

/** Slurm job 12 on node1's GPU 0, in the slurm launcher's words (docs/rest.md, "Kernels that run elsewhere"). */
export function slurmRunning(fields: Partial<IElsewhere> = {}): IElsewhere {
  return {
    launcher: 'slurm',
    title: 'Slurm jobs',
    id: 'slurm-12',
    state: 'running',
    state_title: 'Slurm runs job 12 on node1',
    where: ['Slurm job 12 on node1', 'GPU 0', '8/32 shards (1/4 GPU)'],
    name: 'Slurm job 12 on node1',
    reason: null,
    reason_text: null,
    place_text: null,
    note: 'GPU memory through Slurm job 12 on node1 (shards fence nothing: cooperative limits)',
    ended: null,
    cancel: false,
    ref: '12',
    engine: 'Slurm',
    line: "Slurm's queue",
    notice: null,
    ...fields
  };
}

/** A kernel running in Slurm job 12 on node1's GPU 0, as `GET /api/vgpu/slices` sends it. */
export function runningJob(
  fields: Partial<ISlice> = {},
  where: Partial<IElsewhere> = {}
): ISlice {
  return makeSlice({
    id: 'slurm-12',
    kernel_id: 'k-train',
    kernel_display_name: 'Python 3 (1/4 GPU, Slurm)',
    path: 'work/train.ipynb',
    owner: null,
    pid: null,
    gpus: ['slurm:node1:0'],
    gpu_indices: [0],
    fraction: 0.25,
    request_text: '1/4 GPU: 8 of 32 shards',
    memory_reserved: 4 * GiB,
    memory_used: 1.5 * GiB,
    usage_source: 'reported',
    usage_note:
      'Reported by the kernel itself, from node1: what its frameworks say they hold.',
    tier: 'Slurm job 12 on node1 (shards fence nothing: cooperative limits)',
    state: 'ok',
    created: 10,
    elsewhere: slurmRunning(where),
    ...fields
  });
}

/** A kernel whose Slurm job 13 is pending, as the reply's `waiting` has it. */
export function pendingJob(
  fields: Partial<IWaiting> = {},
  where: Partial<IElsewhere> = {}
): IWaiting {
  return makeWaiter({
    ticket: 'slurm-13',
    position: 1,
    holder: 'k-queued',
    kernel_id: 'k-queued',
    path: 'work/queued.ipynb',
    kernel_display_name: 'Python 3 (1/4 GPU, Slurm)',
    request_text: '1/4 GPU: 8 of 32 shards',
    waiting_seconds: 42,
    elsewhere: slurmRunning({
      id: 'slurm-13',
      state: 'pending',
      state_title: 'Slurm keeps job 13 in its queue: Resources',
      where: ['Slurm job 13', '8/32 shards (1/4 GPU)'],
      name: 'Slurm job 13',
      reason: 'Resources',
      reason_text: 'no node has the GPU shards free now',
      place_text: "place 1 in partition gpu's queue",
      note: null,
      cancel: true,
      ref: '13',
      ...where
    }),
    ...fields
  });
}

export const actions: ISliceActions = {
  openNotebook: () => undefined,
  kernelDisplayName: s => s.kernel_display_name ?? 'kernel',
  shutdownKernel: () => undefined,
  releaseSlice: () => undefined,
  copySliceId: () => undefined,
  keepSlice: () => undefined
};
export const waitingActions: IWaitingActions = {
  cancel: () => undefined,
  openNotebook: () => undefined
};

export function jobs(running: ISlice[], waiting: IWaiting[]): string {
  return render(
    <ElsewhereCards
      slices={running}
      waiting={waiting}
      taken={Date.now()}
      colour={() => 1}
      actions={actions}
      waitingActions={waitingActions}
    />
  );
}

/** The panel's body for a snapshot of this server: its GPUs (none: a login node), slices and line. */
export function body(
  options: {
    devices?: IDevice[];
    slices?: ISlice[];
    waiting?: IWaiting[];
    launchers?: ILauncherInfo[];
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
        waiting: options.waiting ?? [],
        launchers: options.launchers ?? []
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
    />
  );
}
