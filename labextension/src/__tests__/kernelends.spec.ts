import { Notification } from '@jupyterlab/apputils';

import { endOf, KernelEnds } from '../notes/kernelends';
import { IRefusal } from '../store/types';

jest.mock('@jupyterlab/apputils', () => ({
  Notification: { warning: jest.fn() }
}));
jest.mock('../store/sessions', () => ({ sessionContextOf: () => null }));

function note(kernelId: string, reason = 'job_ended'): IRefusal {
  return {
    id: '0'.repeat(24),
    t: Date.now() / 1000,
    kernel_id: kernelId,
    kernel_name: 'python3-vgpu-1-4-slurm',
    kernel_display_name: 'Python 3 (1/4 GPU, Slurm)',
    path: 'work/train.ipynb',
    status: 503,
    reason,
    message:
      "Slurm ended this kernel's job 18: its time limit was reached (TIMEOUT). Start a new kernel (Kernel > Restart Kernel or a new notebook) to get a new job.",
    summary:
      "Slurm ended this kernel's job 18: its time limit was reached (TIMEOUT).",
    asked: null,
    fits_now: null,
    gpus: []
  } as unknown as IRefusal;
}

describe('a kernel its engine ended', () => {
  it('finds the note of that kernel only, and only of an end', () => {
    const notes = [note('other'), note('k-1', 'full'), note('k-1')];
    expect(endOf(notes, 'k-1')).toBe(notes[2]);
    expect(endOf([note('k-1', 'full')], 'k-1')).toBeNull();
    expect(endOf([], 'k-1')).toBeNull();
  });

  it("says the server's sentence once, and nothing when the server has none", async () => {
    const warning = Notification.warning as jest.Mock;
    warning.mockClear();
    const asked: number[] = [];
    const ends = new KernelEnds({
      widgets: () => [],
      refusals: async since => {
        asked.push(since);
        return [note('k-1')];
      }
    });
    expect(await ends.said('k-2')).toBe(false);
    expect(await ends.said('k-1')).toBe(true);
    expect(await ends.said('k-1')).toBe(false);
    expect(warning).toHaveBeenCalledTimes(1);
    expect(warning.mock.calls[0][0]).toBe(
      "work/train.ipynb: Slurm ended this kernel's job 18: its time limit was reached (TIMEOUT). Start a new kernel (Kernel > Restart Kernel or a new notebook) to get a new job."
    );
    expect(asked.every(t => t <= Date.now() / 1000 - 60)).toBe(true);
  });

  it('a server that cannot answer is no error shown', async () => {
    const warning = Notification.warning as jest.Mock;
    warning.mockClear();
    const quiet = jest
      .spyOn(console, 'warn')
      .mockImplementation(() => undefined);
    const ends = new KernelEnds({
      widgets: () => [],
      refusals: async () => {
        throw new Error('503');
      }
    });
    expect(await ends.said('k-1')).toBe(false);
    expect(warning).not.toHaveBeenCalled();
    quiet.mockRestore();
  });
});
