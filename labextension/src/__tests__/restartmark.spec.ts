/**
 * Which of the server's events mark a notebook as restarted (issue 49), and the mark's words.
 */
import { restartedBy, restartMarkText } from '../format/format';
import { IWatchdogEvent } from '../store/api';

jest.mock('@jupyterlab/apputils', () => ({}));

function event(fields: Partial<IWatchdogEvent>): IWatchdogEvent {
  return {
    t: 1_700_000_000,
    slice_id: 's1',
    kernel_id: 'k1',
    action: 'burst',
    ok: true,
    message:
      'work/a.ipynb still used 2.1 GiB above its 4.0 GiB request 1 min after its notice, while 1 waiting in line: restarted to give its burst back.',
    ...fields
  };
}

describe('restart marks', () => {
  it('marks a burst taken back by a restart, and the policy restart', () => {
    expect(restartedBy(event({}))).toBe('burst');
    expect(restartedBy(event({ action: 'restart', message: '' }))).toBe(
      'policy'
    );
  });

  it('marks nothing the kernel kept its variables through, or that failed', () => {
    const shutDown = 'work/a.ipynb ...: shut down to give its burst back.';
    expect(restartedBy(event({ message: shutDown }))).toBeNull();
    expect(restartedBy(event({ ok: false }))).toBeNull();
    expect(restartedBy(event({ kernel_id: null }))).toBeNull();
    expect(restartedBy(event({ action: 'idle' }))).toBeNull();
  });

  it('says when, why and what to do', () => {
    expect(restartMarkText(event({}), 'burst')).toMatch(
      /^Kernel restarted at \d\d:\d\d:\d\d to give its GPU burst back: its variables are gone, run the cells again$/
    );
    expect(restartMarkText(event({}), 'policy')).toContain(
      "by the admin's GPU policy"
    );
  });
});
