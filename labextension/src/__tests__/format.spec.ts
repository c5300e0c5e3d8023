/**
 * The pure functions of format.ts. Where one mirrors the server, the expected words come from
 * the server: src/vocabulary.json (written by `python -m jupyter_vgpu.vocabulary`), or figures
 * taken from `jupyter_vgpu.units.format_bytes` and `jupyter_vgpu.enforcement.thread_percentage`.
 */
import {
  commandText,
  fixed,
  formatBytes,
  formatDuration,
  formatPercent,
  formatUsage,
  gatewayText,
  holderLabel,
  kernelLabel,
  pathLabel,
  share,
  shareNote,
  shareSentence,
  shellWords,
  stateText,
  threadPercentage,
  tierShareNote,
  VOCABULARY,
  waiterLabel
} from '../format/format';
import vocabulary from '../vocabulary.json';
import { makeSlice, makeWaiter } from './fixtures';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const TIER_KINDS = Object.keys(
  vocabulary.tiers
) as (keyof typeof vocabulary.tiers)[];

describe('formatBytes', () => {
  // [bytes, what jupyter_vgpu.units.format_bytes says]
  const server: [number, string][] = [
    [0, '0 B'],
    [1, '1 B'],
    [512, '512 B'],
    [1023, '1023 B'],
    [1024, '1 KiB'],
    [1536, '2 KiB'],
    [2560, '2 KiB'],
    [1024 ** 2 - 1, '1024 KiB'],
    [MiB, '1 MiB'],
    [2.5 * MiB, '2 MiB'],
    [5 * MiB + 1, '5 MiB'],
    [GiB - 1, '1024 MiB'],
    [GiB, '1.0 GiB'],
    [1.25 * GiB, '1.2 GiB'],
    [1.35 * GiB, '1.4 GiB'],
    [Math.floor(2.15 * GiB), '2.1 GiB'],
    [1024 ** 4, '1.0 TiB'],
    [1.5 * 1024 ** 4, '1.5 TiB'],
    [-2048, '-2 KiB'],
    [2.5, '2 B'],
    [3.5, '4 B']
  ];

  it.each(server)('reads %p bytes as the server does: %p', (bytes, text) => {
    expect(formatBytes(bytes)).toBe(text);
  });

  it('shows a dash for what is unknown', () => {
    expect(formatBytes(null)).toBe('–');
    expect(formatBytes(undefined)).toBe('–');
    expect(formatBytes(NaN)).toBe('–');
    expect(formatBytes(Infinity)).toBe('–');
  });
});

describe('fixed', () => {
  it.each([
    [1.25, 1, '1.2'],
    [1.35, 1, '1.4'],
    [0.45, 1, '0.5'],
    [1.15, 1, '1.1'],
    [2.5, 0, '2'],
    [3.5, 0, '4'],
    [0.5, 0, '0'],
    [-2.5, 0, '-2'],
    [-1.25, 1, '-1.2'],
    [1023.5, 0, '1024'],
    [7, 1, '7.0'],
    [0, 0, '0']
  ])('formats %p with %p digits as Python does: %p', (value, digits, text) => {
    expect(fixed(value, digits)).toBe(text);
  });
});

describe('formatUsage', () => {
  it('gives both numbers in GiB when the total is at least 1 GiB', () => {
    expect(formatUsage(2.1 * GiB, 4 * GiB)).toBe('2.1 / 4.0 GiB');
    expect(formatUsage(1.25 * GiB, 4 * GiB)).toBe('1.2 / 4.0 GiB');
  });

  it('gives both numbers in MiB below 1 GiB', () => {
    expect(formatUsage(100 * MiB, 512 * MiB)).toBe('100 / 512 MiB');
  });

  it('shows a dash for an unknown use', () => {
    expect(formatUsage(null, 4 * GiB)).toBe('– / 4.0 GiB');
    expect(formatUsage(undefined, 512 * MiB)).toBe('– / 512 MiB');
  });
});

describe('formatPercent', () => {
  it('rounds to a whole percent, or says nothing is known', () => {
    expect(formatPercent(62.6)).toBe('63%');
    expect(formatPercent(0)).toBe('0%');
    expect(formatPercent(null)).toBe('–');
    expect(formatPercent(undefined)).toBe('–');
  });
});

describe('share', () => {
  it('is the part of the total, clamped to [0, 1]', () => {
    expect(share(1, 4)).toBe(0.25);
    expect(share(8, 4)).toBe(1);
    expect(share(-1, 4)).toBe(0);
    expect(share(null, 4)).toBe(0);
    expect(share(undefined, 4)).toBe(0);
    expect(share(1, 0)).toBe(0);
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0 s'],
    [42.4, '42 s'],
    [59.6, '1 min'],
    [60, '1 min'],
    [185, '3 min 5 s'],
    [3600, '1 h'],
    [3720, '1 h 2 min'],
    [-5, '0 s']
  ])('reads %p seconds as %p', (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });

  it('shows a dash for what is unknown', () => {
    expect(formatDuration(null)).toBe('–');
    expect(formatDuration(undefined)).toBe('–');
    expect(formatDuration(NaN)).toBe('–');
  });
});

describe('pathLabel', () => {
  it('names a notebook by its file name and a command as it is', () => {
    expect(pathLabel('work/deep/train.ipynb')).toBe('train.ipynb');
    expect(pathLabel('python work/train.py')).toBe('python work/train.py');
    expect(pathLabel(null)).toBe('');
    expect(pathLabel(undefined)).toBe('');
  });
});

describe('commandText', () => {
  it('joins an argument list and keeps a string', () => {
    expect(
      commandText(
        makeSlice({ holder_kind: 'command', command: ['python', 'a.py'] })
      )
    ).toBe('python a.py');
    expect(
      commandText(makeSlice({ holder_kind: 'command', command: 'python a.py' }))
    ).toBe('python a.py');
    expect(commandText(makeSlice({ command: null }))).toBe('');
  });
});

describe('holderLabel', () => {
  it("names a kernel's slice by its notebook's file name", () => {
    expect(holderLabel(makeSlice({ path: 'work/deep/train.ipynb' }))).toBe(
      'train.ipynb'
    );
  });

  it('names a kernel without a notebook by the start of its id', () => {
    expect(holderLabel(makeSlice())).toBe('kernel 01234567');
    expect(holderLabel(makeSlice({ kernel_id: null }))).toBe('slice s1');
  });

  it("names a command by its program's file name and its arguments", () => {
    const slice = makeSlice({
      holder_kind: 'command',
      kernel_id: null,
      command: '/opt/conda/bin/python  train.py --epochs 3'
    });
    expect(holderLabel(slice)).toBe('python train.py --epochs 3');
    expect(
      holderLabel(makeSlice({ holder_kind: 'command', command: '  ' }))
    ).toBe('slice s1');
  });

  it("names another user's holder in the server's words", () => {
    const { kernel, command } = vocabulary.hidden_holder;
    expect(
      holderLabel(
        makeSlice({ yours: false, running_here: false, kernel_id: kernel })
      )
    ).toBe(kernel);
    expect(
      holderLabel(
        makeSlice({
          holder_kind: 'command',
          kernel_id: null,
          command,
          yours: false
        })
      )
    ).toBe(command);
  });
});

describe('kernelLabel', () => {
  it("shortens a kernel id, and keeps the server's words for another user's kernel", () => {
    expect(kernelLabel('0123456789abcdef')).toBe('kernel 01234567');
    expect(kernelLabel(vocabulary.hidden_holder.kernel)).toBe(
      vocabulary.hidden_holder.kernel
    );
  });
});

describe('waiterLabel', () => {
  it('names a waiting kernel by its notebook, else by its id', () => {
    expect(waiterLabel(makeWaiter({ path: 'deep/train.ipynb' }))).toBe(
      'train.ipynb'
    );
    expect(waiterLabel(makeWaiter())).toBe('kernel 01234567');
    expect(
      waiterLabel(makeWaiter({ kernel_id: null, holder: 'fedcba9876543210' }))
    ).toBe('kernel fedcba98');
    expect(waiterLabel(makeWaiter({ kernel_id: null, holder: '' }))).toBe(
      'request 7'
    );
  });

  it('names a waiting command as the server sends it', () => {
    expect(
      waiterLabel(
        makeWaiter({
          holder_kind: 'command',
          kernel_id: null,
          holder: 'python a.py'
        })
      )
    ).toBe('python a.py');
    expect(
      waiterLabel(
        makeWaiter({ holder_kind: 'command', kernel_id: null, holder: '' })
      )
    ).toBe('request 7');
  });

  it('reads a waiting command as the shell would, without its quoting (issue 49)', () => {
    // what shlex.join(["/usr/bin/python", "-c", "print('hi there')"]) sends
    const holder = "/usr/bin/python -c 'print('\"'\"'hi there'\"'\"')'";
    expect(
      waiterLabel(
        makeWaiter({ holder_kind: 'command', kernel_id: null, holder })
      )
    ).toBe("python -c print('hi there')");
    expect(shellWords('a "b \\"c\\"" d\\ e')).toEqual(['a', 'b "c"', 'd e']);
    expect(shellWords("python -c 'open")).toBeNull();
    // text a shell would not read is shown as it came
    expect(
      waiterLabel(
        makeWaiter({ holder_kind: 'command', kernel_id: null, holder: "a 'b" })
      )
    ).toBe("a 'b");
  });

  it("names another user's waiting request in the server's words", () => {
    const { kernel, command } = vocabulary.hidden_holder;
    expect(
      waiterLabel(
        makeWaiter({ kernel_id: kernel, holder: kernel, yours: false })
      )
    ).toBe(kernel);
    expect(
      waiterLabel(
        makeWaiter({ holder_kind: 'command', kernel_id: null, holder: command })
      )
    ).toBe(command);
  });
});

describe('stateText', () => {
  it('warns near and over the slice only', () => {
    expect(stateText(makeSlice({ state: 'near' }))).toMatch(/^Near its slice/);
    expect(stateText(makeSlice({ state: 'over' }))).toMatch(/^Over its slice/);
    expect(stateText(makeSlice({ state: 'ok' }))).toBeNull();
    expect(stateText(makeSlice({ state: 'unknown' }))).toBeNull();
  });
});

describe('threadPercentage', () => {
  // [fraction, what jupyter_vgpu.enforcement.thread_percentage says]
  it.each([
    [0.25, 25],
    [0.29, 29],
    [1 / 3, 34],
    [0.5, 50],
    [0.07, 7],
    [0.14, 14],
    [0.28, 28],
    [0.57, 57],
    [0.58, 58],
    [0.1 + 0.2, 30],
    [0.123456789, 13],
    [0.001, 1],
    [0.00001, 1],
    [1, 100],
    [1.5, 100]
  ])('gives a slice of %p of the GPU %p% of the SMs', (fraction, percent) => {
    expect(threadPercentage(fraction)).toBe(percent);
  });
});

describe('shareNote', () => {
  it('knows the five tiers the server names', () => {
    expect(TIER_KINDS.sort()).toEqual([
      'cooperative',
      'hami-core',
      'mig',
      'mps',
      'mps-partition'
    ]);
  });

  it.each(TIER_KINDS)(
    "says what a 1/4 slice of %s reserves in the server's words",
    kind => {
      const slice = makeSlice({ tier_kind: kind, fraction: 0.25 });
      expect(shareNote(slice)).toBe(vocabulary.tiers[kind].share_note_quarter);
    }
  );

  it.each(TIER_KINDS)(
    "says what a slice of %s of an unknown share reserves in the server's words",
    kind => {
      const note = vocabulary.tiers[kind].share_note;
      expect(shareNote(makeSlice({ tier_kind: kind, fraction: null }))).toBe(
        note
      );
      expect(shareNote(makeSlice({ tier_kind: kind, fraction: 0 }))).toBe(note);
    }
  );

  it("names an MPS slice's share of the SMs by the server's rule", () => {
    const slice = makeSlice({ tier_kind: 'mps', fraction: 1 / 3 });
    expect(shareNote(slice)).toBe(
      vocabulary.tiers.mps.share_note_quarter.replace('25%', '34%')
    );
    expect(shareNote(slice)).toBe('memory, and 34% of the SMs (MPS)');
    expect(tierShareNote('mps', 0.07)).toBe('memory, and 7% of the SMs (MPS)');
  });

  it('reads a slice of an unknown tier as cooperative', () => {
    const note = vocabulary.tiers.cooperative.share_note;
    expect(shareNote(makeSlice({ tier_kind: undefined }))).toBe(note);
    expect(shareNote(makeSlice({ tier_kind: 'something-new' }))).toBe(note);
  });

  it('prefers what the server says of the slice', () => {
    const slice = makeSlice({ tier_kind: 'mps', share_note: 'all of it' });
    expect(shareNote(slice)).toBe('all of it');
  });

  it('makes one sentence of the request and its note', () => {
    expect(shareSentence(makeSlice({ request_text: '1/4 GPU' }))).toBe(
      `1/4 GPU reserves ${vocabulary.tiers.cooperative.share_note}.`
    );
  });
});

describe('VOCABULARY', () => {
  it('is the JSON the server wrote', () => {
    expect(VOCABULARY).toEqual(vocabulary);
  });

  it('names a known share of the SMs in the MPS quarter note only', () => {
    expect(vocabulary.tiers.mps.share_note_quarter).toContain('25%');
    expect(vocabulary.tiers.mps.share_note).not.toContain('%');
    expect(vocabulary.tiers.cooperative.share_note_quarter).toBe(
      vocabulary.tiers.cooperative.share_note
    );
    expect(vocabulary.tiers.mig.share_note_quarter).toBe(
      vocabulary.tiers.mig.share_note
    );
  });
});

describe('gatewayText', () => {
  it('names the GPU node and its URL', () => {
    expect(gatewayText({ url: 'http://gpu01:8890/node', node: 'gpu01' })).toBe(
      'GPU node gpu01 (http://gpu01:8890/node)'
    );
    expect(gatewayText({ url: 'http://gpu01:8890', node: null })).toBe(
      'GPU node http://gpu01:8890'
    );
  });
});
