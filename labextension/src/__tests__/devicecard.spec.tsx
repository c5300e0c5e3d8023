/**
 * A GPU card in a pod's share (or a Slurm job's shards), and its utilisation sparkline.
 */
import * as React from 'react';

import { IDevice } from '../store/api';
import { DeviceCard, podShareTitle } from '../sidebar/devicecard';
import { IHistorySource, ISliceActions } from '../sidebar/slicerow';
import { attr, render, tags, texts } from './render';

jest.mock('@jupyterlab/ui-components', () =>
  jest.requireActual('./mocks').uiComponents()
);
jest.mock('../icons', () => jest.requireActual('./mocks').icons());
jest.mock('@jupyterlab/apputils', () => ({
  Dialog: { okButton: () => ({}) },
  showDialog: jest.fn(),
  Notification: { warning: jest.fn(), info: jest.fn(), dismiss: jest.fn() }
}));

const GiB = 1024 ** 3;
const T0 = 1700000000;

/** Plain history: no points. */
const history: IHistorySource = {
  slice: () => [],
  device: () => [],
  now: () => T0
};

function actions(keep = jest.fn()): ISliceActions {
  return {
    openNotebook: jest.fn(),
    kernelDisplayName: s => s.kernel_display_name ?? 'kernel',
    shutdownKernel: jest.fn(),
    releaseSlice: jest.fn(),
    copySliceId: jest.fn(),
    keepSlice: keep
  };
}

function device(fields: Partial<IDevice> = {}): IDevice {
  return {
    index: 0,
    uuid: 'GPU-0',
    name: 'Tesla T4',
    memory_total: 4 * GiB,
    memory_used: 0,
    memory_reserved: 0,
    memory_used_by_slices: 0,
    memory_over_use: 0,
    memory_foreign: 0,
    memory_free: 4 * GiB,
    utilization: 0,
    mig_mode: false,
    tier: 'cooperative',
    slices: [],
    ...fields
  };
}

describe("a GPU card in a pod's share", () => {
  const shared = device({
    pod_share: "this pod's share: 4.0 GiB of 16.0 GiB (HAMi)",
    card_memory: 16 * GiB,
    sm_limit: 50
  });

  function card(shown: IDevice): string {
    return render(
      <DeviceCard
        device={shown}
        slices={[]}
        colour={() => 0}
        actions={actions()}
        history={history}
      />
    );
  }

  it('shows the share under the name, muted', () => {
    const html = card(shared);
    expect(texts(html, 'jp-vgpu-DeviceCard-podShare')).toEqual([
      "this pod's share: 4.0 GiB of 16.0 GiB (HAMi)"
    ]);
    const line = tags(html, 'div', 'jp-vgpu-DeviceCard-podShare')[0];
    expect(attr(line, 'title')).toContain('The card itself has 16.0 GiB.');
  });

  it('says what the share means', () => {
    expect(podShareTitle(shared).split('\n')).toEqual([
      "This server runs in a pod that a scheduler placed on a shared GPU: 4.0 GiB is the pod's share, and slices are fractions of it.",
      'The card itself has 16.0 GiB.',
      "The pod may use 50% of the card's SMs."
    ]);
  });

  it("says a Slurm job's shards the same way", () => {
    const job = device({
      memory_total: 8 * GiB,
      share: 'Slurm job 1234: 16/32 shards of GPU 0, 8.0 GiB',
      slurm_job: '1234',
      card_memory: 16 * GiB
    });
    const html = card(job);
    expect(texts(html, 'jp-vgpu-DeviceCard-podShare')).toEqual([
      'Slurm job 1234: 16/32 shards of GPU 0, 8.0 GiB'
    ]);
    expect(podShareTitle(job).split('\n')).toEqual([
      "This server runs in Slurm job 1234: 8.0 GiB is the job's share of the GPU, and slices are fractions of it.",
      'The card itself has 16.0 GiB.'
    ]);
  });

  it('shows nothing of the kind outside such a pod', () => {
    for (const d of [device(), device({ pod_share: null })]) {
      const html = card(d);
      expect(tags(html, 'div', 'jp-vgpu-DeviceCard-podShare')).toEqual([]);
    }
  });
});

describe("a GPU card's utilisation sparkline", () => {
  function card(points: { t: number; util: number | null }[]): string {
    const source: IHistorySource = {
      ...history,
      device: uuid =>
        uuid === 'GPU-0' ? points.map(p => ({ ...p, used: 0 })) : []
    };
    return render(
      <DeviceCard
        device={device()}
        slices={[]}
        colour={() => 0}
        actions={actions()}
        history={source}
      />
    );
  }

  it("draws the utilisation of the GPU's history (the server sends it once)", () => {
    const html = card([
      { t: 1, util: 0 },
      { t: 2, util: 100 }
    ]);
    expect(tags(html, 'svg', 'jp-vgpu-Sparkline')).toHaveLength(1);
    expect(html).toContain('<polyline points="0.0,15.0 60.0,1.0"></polyline>');
  });

  it('draws nothing before the history has two points', () => {
    expect(
      tags(card([{ t: 1, util: 50 }]), 'svg', 'jp-vgpu-Sparkline')
    ).toEqual([]);
  });
});
