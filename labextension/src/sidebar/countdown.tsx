/**
 * A countdown that ticks: a notice's time left (an idle kernel about to be reclaimed, a burst
 * asked back) in a slice row and in the status bar, counted down in the browser between two
 * replies of the server.
 */
import * as React from 'react';

import { IIdleNotice } from '../store/api';
import { noticeSecondsLeft } from '../format/format';

/** How often a countdown redraws (ms). */
const TICK_MS = 1000;

/**
 * The browser's clock (ms), redrawn every second while `active`: a component that shows a
 * countdown calls it so the figure moves between two replies.
 */
export function useTick(active: boolean): number {
  const [now, setNow] = React.useState(() => Date.now());
  React.useEffect(() => {
    if (!active) {
      return;
    }
    setNow(Date.now());
    const timer = window.setInterval(() => setNow(Date.now()), TICK_MS);
    return () => window.clearInterval(timer);
  }, [active]);
  return Math.max(now, Date.now());
}

/**
 * Seconds left on a notice (idle or burst) now, and when it runs out on the browser's clock (ms), from the
 * reply that carried it (`received`: when it arrived, ms on the browser's clock).
 */
export function useNoticeCountdown(
  notice: IIdleNotice | null | undefined,
  received: number
): { left: number; deadline: number } {
  const now = useTick(!!notice);
  if (!notice) {
    return { left: 0, deadline: now };
  }
  const left = noticeSecondsLeft(notice, (now - received) / 1000);
  return { left, deadline: received + noticeSecondsLeft(notice, 0) * 1000 };
}
