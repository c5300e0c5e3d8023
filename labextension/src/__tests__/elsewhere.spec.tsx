/**
 * Kernels that run elsewhere (issue 40, "Launchers own their views"; issue 32, "Views on the login
 * node"): a card per launcher built from each row's `elsewhere` and the reply's `launchers`, in
 * the launcher's words as they come. Slurm's rows (a running job's id, node, GPU, shards and
 * fraction, state and reported use; a pending one's reason and place, and Cancel) read as they
 * always did, kept out of this server's GPU cards and line; a fake launcher ("faraway") gets its
 * own card with its own words; the login node without a GPU says where its GPU kernels run; the
 * status bar's words and tooltips.
 */
import * as React from 'react';

import { IElsewhere } from '../store/api';
import {
  ELSEWHERE_SIMULATED,
  elsewherePlaceText,
  elsewhereReasonText,
  elsewhereText,
  elsewhereWaitingText,
  elsewhereWaitingTitle,
  statusSimulated,
  statusText,
  statusTitle
} from '../format/format';
import { ElsewhereCards } from '../sidebar/elsewhere';
import {
  actions,
  body,
  jobs,
  pendingJob,
  runningJob,
  SLURM,
  slurmRunning,
  waitingActions
} from './elsewherefixtures';
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

describe("the words for a Slurm job, the launcher's", () => {
  it('say where a running job is and what it holds', () => {
    expect(elsewhereText(runningJob().elsewhere!)).toBe(
      'Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)'
    );
    expect(
      elsewhereText(
        slurmRunning({
          where: ['Slurm job 12 on node1', 'GPUs 0, 1', '2 GPUs']
        })
      )
    ).toBe('Slurm job 12 on node1 · GPUs 0, 1 · 2 GPUs');
  });

  it('say no node for a pending job, and its reason in words where the server knows them', () => {
    const pending = (where: Partial<IElsewhere> = {}) =>
      pendingJob({}, where).elsewhere!;
    expect(elsewhereText(pending())).toBe(
      'Slurm job 13 · 8/32 shards (1/4 GPU)'
    );
    expect(elsewhereReasonText(pending())).toBe(
      'Resources: no node has the GPU shards free now'
    );
    expect(
      elsewhereReasonText(pending({ reason: 'BeginTime', reason_text: null }))
    ).toBe('BeginTime');
    expect(elsewhereReasonText(pending({ reason: null }))).toBe(
      'no reason given yet'
    );
    expect(
      elsewherePlaceText(
        pending({ place_text: "place 2 in partition gpu's queue" }),
        2
      )
    ).toBe("place 2 in partition gpu's queue");
    // Where the server says no place in words: the place in the engine's line.
    expect(elsewherePlaceText(pending({ place_text: null }), 2)).toBe(
      "place 2 in Slurm's queue"
    );
    expect(elsewherePlaceText(pending({ place_text: null }), null)).toBe(
      "its place in Slurm's queue is not known yet"
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

  it("says simulated when its node's GPUs are, whatever this server's are", () => {
    const simulated = runningJob({}, { simulated: true });
    expect(statusSimulated(simulated, false)).toBe(true);
    expect(statusSimulated(runningJob(), true)).toBe(false);
    expect(statusSimulated(makeSlice({}), true)).toBe(true); // a slice of this server's GPUs
    expect(statusTitle(simulated, null, false).split('\n')).toContain(
      ELSEWHERE_SIMULATED
    );
  });

  it('says a pending job, its reason and place', () => {
    const w = pendingJob();
    expect(elsewhereWaitingText(w, w.elsewhere!)).toBe(
      'GPU: Slurm job 13 pending (Resources) · place 1'
    );
    expect(elsewhereWaitingTitle(w, w.elsewhere!, '42 s').split('\n')).toEqual([
      "queued.ipynb waits in Slurm's queue for 8/32 shards (1/4 GPU): job 13 is pending.",
      "Slurm's reason: Resources: no node has the GPU shards free now.",
      "It is at place 1 in partition gpu's queue, waiting 42 s; it starts on the node Slurm places it on."
    ]);
  });
});

describe('the Slurm jobs card', () => {
  it('shows a running job: notebook, state, job, node, GPU, shards and fraction, reported use', () => {
    const html = jobs([runningJob()], []);
    expect(texts(html, 'jp-vgpu-Elsewhere-title')[0]).toBe('Slurm jobs 1');
    const [row] = tags(html, 'li', 'jp-vgpu-ElsewhereRow');
    expect(attr(row, 'data-job-id')).toBe('12');
    expect(attr(row, 'class')).toContain('jp-vgpu-mod-running');
    expect(texts(html, 'jp-vgpu-SliceRow-holder')).toEqual(['train.ipynb']);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-kernel')).toEqual([
      'Python 3 (1/4 GPU, Slurm)'
    ]);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-state')).toEqual(['running']);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-job')).toEqual([
      'Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)'
    ]);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-use')).toEqual(['1.5 / 4.0 GiB']);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar')).toHaveLength(1);
    expect(tags(html, 'button', 'jp-vgpu-action-shutdown')).toHaveLength(1);
    expect(tags(html, 'p', 'jp-vgpu-SliceRow-note')).toHaveLength(0);
  });

  it("says its node's GPUs are simulated when its kernel reports so", () => {
    const html = jobs([runningJob({}, { simulated: true })], []);
    const chips = tags(html, 'span', 'jp-vgpu-mod-simulated');
    expect(chips).toHaveLength(1);
    expect(texts(html, 'jp-vgpu-mod-simulated')).toEqual(['simulated']);
    expect(attr(chips[0], 'title')).toBe(ELSEWHERE_SIMULATED);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-job')).toEqual([
      'Slurm job 12 on node1 · GPU 0 · 8/32 shards (1/4 GPU)'
    ]);
    expect(
      tags(jobs([runningJob()], []), 'span', 'jp-vgpu-mod-simulated')
    ).toHaveLength(0);
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
    expect(texts(html, 'jp-vgpu-ElsewhereRow-use')).toEqual([
      'use not reported yet'
    ]);
    expect(tags(html, 'div', 'jp-vgpu-SliceBar')).toHaveLength(0);
    expect(texts(html, 'jp-vgpu-SliceRow-note')).toEqual([note]);
  });

  it('says why Slurm ended the job a restarted kernel ran in', () => {
    const ended =
      "Slurm ended this kernel's job 11: its time limit was reached (TIMEOUT). This kernel was restarted in job 12: variables were lost.";
    expect(
      texts(jobs([runningJob({}, { ended })], []), 'jp-vgpu-ElsewhereRow-ended')
    ).toEqual([ended]);
  });

  it('shows a job whose kernel was shut down but whose cancel Slurm has not confirmed as ending, with Cancel', () => {
    const ending =
      'Shut down 40 s ago, but Slurm has not confirmed the cancel of job 12 (Slurm does not answer); it still holds its GPU share, and its cancel is tried again every 5 s.';
    const endingJob = runningJob(
      { running_here: false },
      {
        state: 'ending',
        state_title: ending,
        note: `Ending: ${ending}`,
        notice: ending,
        cancel: true
      }
    );
    const cancelled: string[] = [];
    const html = render(
      <ElsewhereCards
        slices={[endingJob]}
        waiting={[]}
        taken={Date.now()}
        colour={() => 1}
        actions={{ ...actions, cancelJob: job => cancelled.push(job.id) }}
        waitingActions={waitingActions}
      />
    );
    const [row] = tags(html, 'li', 'jp-vgpu-ElsewhereRow');
    expect(attr(row, 'class')).toContain('jp-vgpu-mod-ending');
    expect(attr(row, 'aria-label')).toMatch(/, ending$/);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-state')).toEqual(['ending']);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-ending')).toEqual([ending]);
    const [cancel] = tags(html, 'button', 'jp-vgpu-ElsewhereRow-cancel');
    expect(attr(cancel, 'aria-label')).toBe('Cancel Slurm job 12 on node1');
    expect(tags(html, 'button', 'jp-vgpu-action-shutdown')).toHaveLength(0);
    // Without the action (an older panel) there is no button that would do nothing.
    expect(
      tags(jobs([endingJob], []), 'button', 'jp-vgpu-ElsewhereRow-cancel')
    ).toHaveLength(0);
  });

  it('says a kernel runs unfenced, and why', () => {
    const unfenced =
      "JUPYTER_VGPU_CONTEXT_ALLOWANCE 'lots' is not a size. The kernel runs with the job's GPUs, unfenced: its frameworks are not fitted to the share.";
    const html = jobs(
      [
        runningJob(
          {},
          { note: `Unfenced: ${unfenced}`, notice: `Unfenced: ${unfenced}` }
        )
      ],
      []
    );
    expect(texts(html, 'jp-vgpu-ElsewhereRow-unfenced')).toEqual([
      `Unfenced: ${unfenced}`
    ]);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-state')).toEqual(['running']);
  });

  it("shows a pending job with Slurm's reason in words, its place, and Cancel for your own", () => {
    const html = jobs([], [pendingJob()]);
    const [row] = tags(html, 'li', 'jp-vgpu-ElsewhereRow');
    expect(attr(row, 'class')).toContain('jp-vgpu-mod-pending');
    expect(attr(row, 'data-job-id')).toBe('13');
    expect(texts(html, 'jp-vgpu-Waiting-place')).toEqual(['#1']);
    expect(texts(html, 'jp-vgpu-Waiting-holder')).toEqual(['queued.ipynb']);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-state')).toEqual(['pending']);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-job')).toEqual([
      'Slurm job 13 · 8/32 shards (1/4 GPU)'
    ]);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-why')).toEqual([
      'Resources: no node has the GPU shards free now'
    ]);
    expect(texts(html, 'jp-vgpu-ElsewhereRow-place')[0]).toMatch(
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
        runningJob(
          { id: 'slurm-20', gpus: ['slurm:node2:0'], created: 1 },
          { id: 'slurm-20', ref: '20' }
        ),
        runningJob({ id: 'slurm-12', created: 5 })
      ],
      [
        pendingJob(
          { ticket: 'slurm-15', position: 2 },
          {
            id: 'slurm-15',
            ref: '15',
            reason: 'Priority',
            reason_text: 'jobs ahead of it come first'
          }
        ),
        pendingJob()
      ]
    );
    expect(
      tags(html, 'li', 'jp-vgpu-ElsewhereRow').map(t => attr(t, 'data-job-id'))
    ).toEqual(['12', '20', '13', '15']);
    expect(texts(html, 'jp-vgpu-Elsewhere-title')[0]).toBe(
      'Slurm jobs 42 pending'
    );
    expect(texts(html, 'jp-vgpu-ElsewhereRow-why')).toEqual([
      'Resources: no node has the GPU shards free now',
      'Priority: jobs ahead of it come first'
    ]);
  });

  it('is not there without Slurm jobs', () => {
    expect(jobs([], [])).toBe('');
  });
});

describe('the panel on a login node', () => {
  it('says where GPU kernels run instead of "Kernels run on the CPU", and lists the jobs', () => {
    const html = body({
      slices: [runningJob()],
      waiting: [pendingJob()],
      launchers: [SLURM]
    });
    expect(texts(html, 'jp-vgpu-Message-title')).toEqual([
      'No GPU on this server.'
    ]);
    expect(texts(html, 'jp-vgpu-Message-detail')).toEqual([
      "Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them: start “Python 3 (1/4 GPU, Slurm)” from the launcher."
    ]);
    expect(html).not.toContain('Kernels run on the CPU');
    expect(tags(html, 'li', 'jp-vgpu-ElsewhereRow')).toHaveLength(2);
    // A pending job is in the Slurm card, not in jupyter-vgpu's own line.
    expect(tags(html, 'section', 'jp-vgpu-Waiting')).toHaveLength(0);
  });

  it('says so before any Slurm kernel started, and names two kernelspecs at most', () => {
    const html = body({
      launchers: [
        { ...SLURM, kernelspecs: ['A (Slurm)', 'B (Slurm)', 'C (Slurm)'] }
      ]
    });
    expect(texts(html, 'jp-vgpu-Message-detail')[0]).toBe(
      "Its GPU kernels run as Slurm jobs on the cluster's GPU nodes, where Slurm places them: start “A (Slurm)”, “B (Slurm)” or 1 more from the launcher."
    );
    expect(tags(html, 'section', 'jp-vgpu-Elsewhere')).toHaveLength(0);
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
      html.indexOf('jp-vgpu-Elsewhere"')
    );
    expect(
      tags(card, 'li', 'jp-vgpu-SliceRow').map(t => attr(t, 'data-slice-id'))
    ).toEqual(['local']);
    expect(
      tags(html, 'li', 'jp-vgpu-ElsewhereRow').map(t => attr(t, 'data-job-id'))
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
