/**
 * Each slice's colour, the same in the sidebar's bar and row, the dashboard and after a page
 * reload: derived from the slice's id, not from the order this page happened to see slices in.
 */

/** How many kernel colours the stylesheet defines (`--jp-vgpu-slice-color-<n>`). */
export const PALETTE_SIZE = 8;

/** At most this many slices' colours are remembered (ended ones too: the dashboard's timeline). */
const REMEMBERED = 512;

/** The colour a slice id asks for: a hash of the id (FNV-1a), the same in every browser. */
export function preferredColour(sliceId: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < sliceId.length; i++) {
    hash ^= sliceId.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % PALETTE_SIZE;
}

/** What a slice needs for its colour: its id, and when it was made (the order of claims). */
export interface IColoured {
  id: string;
  created?: number;
}

/**
 * The colours of the live slices: each takes the colour its id asks for, unless an older live
 * slice has it already, then the next free one. Oldest first, so every page that sees the same
 * slices gives them the same colours; and a slice keeps its colour while this page shows it.
 */
export class SliceColours {
  /** Give every slice of `live` not coloured yet its colour. */
  assign(live: readonly IColoured[]): void {
    const liveIds = new Set(live.map(s => s.id));
    const taken = new Set<number>();
    this._colours.forEach((colour, id) => {
      if (liveIds.has(id)) {
        taken.add(colour);
      }
    });
    const fresh = live
      .filter(s => !this._colours.has(s.id))
      .sort(
        (a, b) => (a.created ?? 0) - (b.created ?? 0) || (a.id < b.id ? -1 : 1)
      );
    for (const slice of fresh) {
      const wanted = preferredColour(slice.id);
      let colour = wanted;
      for (let step = 0; step < PALETTE_SIZE; step++) {
        const candidate = (wanted + step) % PALETTE_SIZE;
        if (!taken.has(candidate)) {
          colour = candidate;
          break;
        }
      }
      taken.add(colour);
      this._colours.set(slice.id, colour);
    }
    // Forget the oldest remembered (Map keeps insertion order) beyond the bound.
    for (const id of this._colours.keys()) {
      if (this._colours.size <= REMEMBERED) {
        break;
      }
      if (!liveIds.has(id)) {
        this._colours.delete(id);
      }
    }
  }

  /** A slice's colour: as assigned, else the one its id asks for (a slice this page never saw live). */
  colour(sliceId: string): number {
    return this._colours.get(sliceId) ?? preferredColour(sliceId);
  }

  private _colours = new Map<string, number>();
}
