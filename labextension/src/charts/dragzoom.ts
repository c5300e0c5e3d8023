/**
 * Drag-to-zoom on a time-series plot, without React: a drag across the plot selects the time
 * range under its two ends; a short one is a click.
 */

/** A drag shorter than this (pixels) is a click, not a zoom. */
export const MIN_DRAG_PX = 5;

/**
 * A drag across the plot: started at one x, followed, ended; a drag of at least
 * `MIN_DRAG_PX` pixels calls `onZoom` with the times under its two ends (earliest first).
 */
export class DragZoom {
  constructor(
    /** The time under a pixel of the plot. */
    public timeAt: (x: number) => number,
    public onZoom: (start: number, end: number) => void
  ) {}

  /** The pixels selected so far, [from, to] in the order dragged; null when not dragging. */
  get range(): [number, number] | null {
    return this._from === null ? null : [this._from, this._to];
  }

  begin(x: number): void {
    this._from = x;
    this._to = x;
  }

  /** Follow the pointer; false when no drag is going on. */
  move(x: number): boolean {
    if (this._from === null) {
      return false;
    }
    this._to = x;
    return true;
  }

  /** Finish the drag at `x`; returns the time range passed to `onZoom`, or null for a click. */
  end(x: number): [number, number] | null {
    if (this._from === null) {
      return null;
    }
    const from = this._from;
    this._from = null;
    this._to = x;
    if (Math.abs(x - from) < MIN_DRAG_PX) {
      return null;
    }
    const a = this.timeAt(Math.min(from, x));
    const b = this.timeAt(Math.max(from, x));
    if (!(b > a)) {
      return null;
    }
    this.onZoom(a, b);
    return [a, b];
  }

  cancel(): void {
    this._from = null;
  }

  private _from: number | null = null;
  private _to = 0;
}
