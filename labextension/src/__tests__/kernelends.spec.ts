import { Notification, showDialog } from '@jupyterlab/apputils';

import { endOf, KernelEnds } from '../notes/kernelends';
import { IRefusal } from '../store/types';

jest.mock('@jupyterlab/apputils', () => ({
  Dialog: { okButton: () => ({ label: 'OK' }) },
  Notification: { warning: jest.fn() },
  showDialog: jest.fn()
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
      "Slurm ended this kernel's job 18: its time limit was reached (TIMEOUT, TimeLimit); no new job is asked for this kernel (slurm_restarts 0), so its variables are lost: start a new kernel for this notebook (Kernel > Change Kernel..., or open the notebook again) to run in a new job.",
    summary:
      "Slurm ended this kernel's job 18 (TIMEOUT, TimeLimit): start a new kernel to go on.",
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
    // The gist fits JupyterLab's 140 characters; Details shows the whole sentence.
    const [text, options] = warning.mock.calls[0];
    expect(text).toBe(
      "train.ipynb: Slurm ended this kernel's job 18 (TIMEOUT, TimeLimit): start a new kernel to go on."
    );
    expect(text.length).toBeLessThanOrEqual(140);
    expect(options.autoClose).toBe(false);
    expect(options.actions.map((a: any) => a.label)).toEqual(['Details']);
    options.actions[0].callback();
    const shown = (showDialog as jest.Mock).mock.calls[0][0];
    expect(shown.body).toBe(note('k-1').message);
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
