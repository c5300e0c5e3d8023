/**
 * The server's words for enforcement tiers (src/vocabulary.json) and what a slice's share reserves.
 */
import { HolderKind, ISlice } from '../store/api';
import vocabulary from '../vocabulary.json';

/** What the server says of one enforcement tier (`jupyter_vgpu.vocabulary`, per tier). */
export interface ITierWords {
  /** How every view names the tier: "cooperative", "hard (MPS)", "hard (MIG device)". */
  text: string;
  /** Whether the hardware holds a slice's processes to their share. */
  hard: boolean;
  /** What a slice of this tier reserves, its share of the SMs not known. */
  share_note: string;
  /** What a 1/4 slice of this tier reserves. */
  share_note_quarter: string;
}

/**
 * The words the server and this extension share (`src/vocabulary.json`, written by
 * `python -m jupyter_vgpu.vocabulary`; tests/ui/test_labextension_checks.py fails when it is stale).
 */
export const VOCABULARY: {
  tiers: { [kind: string]: ITierWords };
  hidden_holder: { [kind in HolderKind]: string };
  holder_kinds: string[];
  usage_sources: string[];
} = vocabulary;

/** The tier a slice of an unknown `tier_kind` reads as: no compute is shared out. */
const DEFAULT_TIER = 'cooperative';

/** The percentage `share_note_quarter` names: what a 1/4 slice gets of the SMs. */
const QUARTER_PERCENT = '25%';

/**
 * The share of the SMs an MPS client gets for a slice of `fraction`: its percentage, rounded
 * up, 1 to 100. The server's rule (`jupyter_vgpu.enforcement.thread_percentage`), which first
 * rounds to 6 decimals so that 0.07 * 100 = 7.000000000000001 reads as 7, not 8.
 */
export function threadPercentage(fraction: number): number {
  return Math.max(
    1,
    Math.min(100, Math.ceil(Number((fraction * 100).toFixed(6))))
  );
}

/**
 * What a slice of tier `kind` reserves, in the server's words (its tier's `share_note`), with
 * its share of the SMs when the tier shares them out and `fraction` is known.
 */
export function tierShareNote(
  kind: string | null | undefined,
  fraction?: number | null
): string {
  const tier =
    (kind ? VOCABULARY.tiers[kind] : undefined) ??
    VOCABULARY.tiers[DEFAULT_TIER];
  if (
    fraction &&
    isFinite(fraction) &&
    tier.share_note_quarter !== tier.share_note &&
    tier.share_note_quarter.includes(QUARTER_PERCENT)
  ) {
    // The server names a known share in the note: "25%" for a quarter, so the rest follows.
    return tier.share_note_quarter.replace(
      QUARTER_PERCENT,
      `${threadPercentage(fraction)}%`
    );
  }
  return tier.share_note;
}

/**
 * What a slice's share reserves, in words: the server's `share_note` when it sends one, else
 * the server's words for the tier the slice was placed on (only MPS and MIG share out compute).
 */
export function shareNote(slice: ISlice): string {
  if (slice.share_note) {
    return slice.share_note;
  }
  return tierShareNote(slice.tier_kind, slice.fraction);
}

/** "1/4 GPU reserves memory only; compute is shared with the GPU's other users." */
export function shareSentence(slice: ISlice): string {
  return `${slice.request_text} reserves ${shareNote(slice)}.`;
}
