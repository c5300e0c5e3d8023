/**
 * Drag-to-zoom: the time range a drag across the plot asks for.
 */
import { DragZoom, MIN_DRAG_PX } from '../charts/dragzoom';

describe('zoom', () => {
  /** 100 px of plot from x = 50: t = x - 50. */
  const timeAt = (x: number) => Math.min(100, Math.max(0, x - 50));

  it('passes the times under the two ends of a drag, earliest first', () => {
    const onZoom = jest.fn();
    const drag = new DragZoom(timeAt, onZoom);
    drag.begin(120);
    expect(drag.move(90)).toBe(true);
    expect(drag.range).toEqual([120, 90]);
    expect(drag.end(70)).toEqual([20, 70]);
    expect(onZoom).toHaveBeenCalledWith(20, 70);
    expect(drag.range).toBeNull();
    expect(drag.move(80)).toBe(false);
  });

  it('takes a click for no zoom', () => {
    const onZoom = jest.fn();
    const drag = new DragZoom(timeAt, onZoom);
    drag.begin(100);
    expect(drag.end(100 + MIN_DRAG_PX - 1)).toBeNull();
    drag.begin(100);
    drag.cancel();
    expect(drag.end(140)).toBeNull();
    expect(onZoom).not.toHaveBeenCalled();
  });

  it('clamps a drag beyond the plot to its window', () => {
    const onZoom = jest.fn();
    const drag = new DragZoom(timeAt, onZoom);
    drag.begin(10);
    drag.end(400);
    expect(onZoom).toHaveBeenCalledWith(0, 100);
  });
});
