/**
 * Choosing a GPU kernel (issue 41): which kernel the Select Kernel dialog pre-selects when the
 * notebook's own has no room now (the largest that fits and asks for no more), and the order of
 * the launcher's cards (by size, the plain one of equal sizes first).
 */
import { KernelSpec } from '@jupyterlab/services';

import { IDevice } from '../store/api';
import { launcherRank } from '../launcherorder';
import { roomierChoice, waitingAlternative } from '../store/kernelspecs';

const GiB = 1024 ** 3;

function sliced(name: string, config: { [key: string]: unknown } | null) {
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

function gpu(index: number, free: number): IDevice {
  return {
    index,
    uuid: `GPU-${index}`,
    memory_total: 16 * GiB,
    memory_free: free
  } as IDevice;
}

const SPECS = {
  python3: sliced('python3', null),
  'quarter-a': sliced('quarter-a', { gpu_fraction: 0.25 }),
  tenth: sliced('tenth', { gpu_fraction: 0.1 }),
  'quarter-b': sliced('quarter-b', { gpu_fraction: '1/4' }),
  'one-gib': sliced('one-gib', { gpu_memory: '1GiB' }),
  'six-gib': sliced('six-gib', { gpu_memory: '6GiB' }),
  whole: sliced('whole', { gpu_fraction: 1 }),
  half: sliced('half', { gpu_fraction: 0.5 })
};
const NAMES = Object.keys(SPECS);

describe('roomierChoice', () => {
  it('picks the largest kernel that fits instead of one with no room', () => {
    // 5 GiB free: 1/2 (8 GiB) and 6 GiB do not fit, 1/4 (4 GiB) does; the first of equal size.
    expect(roomierChoice(SPECS, 'whole', NAMES, [gpu(0, 5 * GiB)])).toBe(
      'quarter-a'
    );
    expect(roomierChoice(SPECS, 'half', NAMES, [gpu(0, 2 * GiB)])).toBe(
      'tenth'
    );
    // An amount and a fraction compare on the GPUs' size.
    expect(roomierChoice(SPECS, 'six-gib', NAMES, [gpu(0, 1 * GiB)])).toBe(
      'one-gib'
    );
  });

  it('never picks a larger kernel, and keeps a kernel that fits', () => {
    expect(roomierChoice(SPECS, 'tenth', NAMES, [gpu(0, 0.5 * GiB)])).toBe(
      null
    );
    expect(roomierChoice(SPECS, 'whole', NAMES, [gpu(0, 16 * GiB)])).toBe(null);
    expect(roomierChoice(SPECS, 'python3', NAMES, [gpu(0, 0)])).toBe(null);
    expect(roomierChoice(SPECS, 'whole', NAMES, [])).toBe(null); // GPUs not read yet
  });
});

describe('launcherRank', () => {
  it('orders the kernels ./scripts/lab installs by size, the plain one of equal sizes first', () => {
    const specs = {
      'Python 3 (1 GPU)': sliced('a', { gpu_fraction: 1 }),
      'Python 3 (1/2 GPU)': sliced('b', { gpu_fraction: '1/2' }),
      'Python 3 (1/2 GPU, 2 devices)': sliced('c', {
        gpu_fraction: '1/2',
        logical_devices: 2
      }),
      'Python 3 (1/4 GPU)': sliced('d', { gpu_fraction: '1/4' }),
      'Python 3 (1 GiB GPU)': sliced('e', { gpu_memory: '1GiB' })
    };
    // As JupyterLab sorts them (text: "," before ")"), and as they should read.
    const asText = [
      'Python 3 (1 GiB GPU)',
      'Python 3 (1 GPU)',
      'Python 3 (1/2 GPU, 2 devices)',
      'Python 3 (1/2 GPU)',
      'Python 3 (1/4 GPU)'
    ];
    const rank = (name: string) =>
      launcherRank(specs[name as keyof typeof specs], 16 * GiB)!;
    const sorted = [...asText].sort((a, b) => {
      const [x, y] = [rank(a), rank(b)];
      return x[0] - y[0] || x[1] - y[1] || x[2] - y[2];
    });
    expect(sorted).toEqual([
      'Python 3 (1 GiB GPU)',
      'Python 3 (1/4 GPU)',
      'Python 3 (1/2 GPU)',
      'Python 3 (1/2 GPU, 2 devices)',
      'Python 3 (1 GPU)'
    ]);
    expect(launcherRank(sliced('p', null), 16 * GiB)).toBeNull();
  });
});

describe('waitingAlternative', () => {
  const specs = (...all: KernelSpec.ISpecModel[]) =>
    ({
      default: all[0].name,
      kernelspecs: Object.fromEntries(all.map(s => [s.name, s]))
    }) as KernelSpec.ISpecModels;
  const local = sliced('local', { gpu_fraction: 0.25 });
  const localWaits = sliced('local-waits', {
    gpu_fraction: '1/4',
    wait_timeout: 300
  });
  const slurm = sliced('slurm', {
    gpu_fraction: 0.25,
    launcher: 'slurm',
    slurm_args: ['--partition=gpu']
  });
  const slurmWaits = sliced('slurm-waits', {
    gpu_fraction: 0.25,
    launcher: 'slurm',
    slurm_args: ['--partition=gpu'],
    wait_timeout: 120
  });
  const otherPartition = sliced('slurm-debug-waits', {
    gpu_fraction: 0.25,
    launcher: 'slurm',
    slurm_args: ['--partition=debug'],
    wait_timeout: 600
  });

  it('offers the same slice started the same way, waiting', () => {
    const all = specs(local, localWaits, slurm, slurmWaits, otherPartition);
    expect(waitingAlternative(all, 'local')?.name).toBe('local-waits');
    expect(waitingAlternative(all, 'slurm')?.name).toBe('slurm-waits');
  });

  it('never offers a kernel of another launcher or other options', () => {
    expect(waitingAlternative(specs(slurm, localWaits), 'slurm')).toBeNull();
    expect(waitingAlternative(specs(local, slurmWaits), 'local')).toBeNull();
    expect(
      waitingAlternative(specs(slurm, otherPartition), 'slurm')
    ).toBeNull();
  });

  it('names the launcher or leaves it out alike', () => {
    const explicit = sliced('explicit-local', {
      gpu_fraction: 0.25,
      launcher: 'local',
      wait_timeout: 60
    });
    expect(waitingAlternative(specs(local, explicit), 'local')?.name).toBe(
      'explicit-local'
    );
  });
});
