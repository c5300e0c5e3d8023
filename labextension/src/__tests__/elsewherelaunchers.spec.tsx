/**
 * A launcher the UI has never heard of ("faraway", "Faraway hosts") gets its own card, status bar
 * words and login-node sentence from its rows' `elsewhere` and the reply's `launchers`, with no
 * change to the UI (issue 40, "Launchers own their views"); and the fallbacks for fields a server
 * does not send yet.
 */
import { IElsewhere, ILauncherInfo } from '../store/api';
import {
  elsewhereNotice,
  elsewhereRef,
  elsewhereWaitingText,
  elsewhereWaitingTitle,
  statusText,
  statusTitle
} from '../format/format';
import {
  body,
  pendingJob,
  runningJob,
  SLURM,
  slurmRunning
} from './elsewherefixtures';
import { attr, tags, texts } from './render';

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

describe('a launcher the UI has never heard of', () => {
  const FARAWAY: ILauncherInfo = {
    name: 'faraway',
    title: 'Faraway hosts',
    runs: 'Its GPU kernels run on faraway hosts, where the dispatcher sends them',
    kernelspecs: ['Python 3 (far)']
  };
  function farWhere(fields: Partial<IElsewhere> = {}): IElsewhere {
    return {
      launcher: 'faraway',
      title: 'Faraway hosts',
      id: 'faraway-f7',
      state: 'running',
      state_title: 'The dispatcher runs this kernel on host blue',
      where: ['host blue', 'GPU 3', 'half a GPU'],
      name: 'host blue',
      reason: null,
      reason_text: null,
      place_text: null,
      note: 'GPU memory on host blue',
      ended: null,
      cancel: false,
      ref: 'f7',
      engine: 'the dispatcher',
      line: "the dispatcher's queue",
      notice: null,
      ...fields
    };
  }
  const far = runningJob(
    {
      id: 'faraway-f7',
      kernel_id: 'k-far',
      path: 'work/far.ipynb',
      gpus: ['faraway:blue:3'],
      gpu_indices: [3]
    },
    {}
  );
  far.elsewhere = farWhere();
  const farWaiting = pendingJob(
    { ticket: 'faraway-f8', path: 'work/later.ipynb', position: 4 },
    {}
  );
  farWaiting.elsewhere = farWhere({
    id: 'faraway-f8',
    ref: 'f8',
    state: 'pending',
    state_title: 'The dispatcher holds it until a host is free',
    where: ['request f8', 'half a GPU'],
    name: 'request f8',
    reason: 'NoHost',
    reason_text: 'every host is busy',
    place_text: 'fourth in the dispatcher queue',
    cancel: true
  });

  it('gets its own card beside Slurm’s, with its title and words as they come', () => {
    const html = body({
      slices: [runningJob(), far],
      waiting: [farWaiting],
      launchers: [SLURM, FARAWAY]
    });
    expect(texts(html, 'jp-vgpu-Elsewhere-title')).toEqual([
      'Slurm jobs 1',
      'Faraway hosts 21 pending'
    ]);
    expect(
      tags(html, 'section', 'jp-vgpu-Elsewhere').map(t =>
        attr(t, 'data-launcher')
      )
    ).toEqual(['slurm', 'faraway']);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-job')).toEqual([
      'Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)',
      'host blue · GPU 3 · half a GPU',
      'request f8 · half a GPU'
    ]);
    expect(
      tags(html, 'li', 'jp-vgpu-ElsewhereRow').map(t => attr(t, 'data-job-id'))
    ).toEqual(['12', 'f7', 'f8']);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-why')).toEqual([
      'NoHost: every host is busy'
    ]);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-place')[0]).toMatch(
      /^Fourth in the dispatcher queue · waiting 4[2-9] s$/
    );
    // Its kernels are on its hosts' GPUs, never in this server's line.
    expect(tags(html, 'section', 'jp-vgpu-Waiting')).toHaveLength(0);
    expect(texts(html, 'jp-vgpu-Message-detail')).toEqual([
      "Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them: start “Python 3 (1/4 GPU, Slurm)” from the launcher.",
      'Its GPU kernels run on faraway hosts, where the dispatcher sends them: start “Python 3 (far)” from the launcher.'
    ]);
  });

  it('names itself in the status bar', () => {
    expect(statusText(far)).toBe('GPU 1.5 / 4.0 GiB · host blue');
    expect(statusTitle(far, null, false).split('\n')[0]).toBe(
      'host blue · GPU 3 · half a GPU.'
    );
    expect(elsewhereWaitingText(farWaiting, farWaiting.elsewhere!)).toBe(
      'GPU: request f8 pending (NoHost) · place 4'
    );
    expect(
      elsewhereWaitingTitle(farWaiting, farWaiting.elsewhere!, '1 min').split(
        '\n'
      )
    ).toEqual([
      "later.ipynb waits in the dispatcher's queue for half a GPU: job f8 is pending.",
      "The dispatcher's reason: NoHost: every host is busy.",
      'It is at fourth in the dispatcher queue, waiting 1 min; it starts on the node the dispatcher places it on.'
    ]);
  });

  it('has a card even when the reply does not list it', () => {
    const html = body({ slices: [far] });
    expect(texts(html, 'jp-vgpu-Elsewhere-title')).toEqual(['Faraway hosts 1']);
  });
});

describe('a server that does not send ref, engine, line or notice yet', () => {
  const bare = (e: IElsewhere): IElsewhere => {
    const { ref, engine, line, notice, ...rest } = e;
    void [ref, engine, line, notice];
    return rest;
  };

  it('reads the job from the id, and the line as the launcher’s', () => {
    const w = pendingJob();
    const e = bare(w.elsewhere!);
    expect(elsewhereRef(e)).toBe('13');
    expect(elsewhereWaitingText(w, e)).toBe(
      'GPU: Slurm job 13 pending (Resources) · place 1'
    );
    expect(elsewhereWaitingTitle(w, e, '42 s').split('\n')[0]).toBe(
      "queued.ipynb waits in the launcher's line for 8/32 shards (1/4 GPU): job 13 is pending."
    );
  });

  it('says an ending row’s note under it, and nothing under a running one', () => {
    const running = bare(slurmRunning());
    expect(elsewhereNotice(running)).toBeNull();
    expect(
      elsewhereNotice({ ...running, state: 'ending', note: 'Ending: soon.' })
    ).toBe('Ending: soon.');
  });
});
