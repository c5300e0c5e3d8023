/**
 * What the notice specs (idle.spec.tsx, bursts.spec.tsx) share: JupyterLab's notifications as
 * mocks that hand out ids, cleared before each test, and the figures their slices are made of.
 * A spec mocks the packages with these factories (jest hoists each spec's own `jest.mock`):
 *
 *     jest.mock('@jupyterlab/ui-components', () => jest.requireActual('./mocks').uiComponents());
 *     jest.mock('../icons', () => jest.requireActual('./mocks').icons());
 *     jest.mock('@jupyterlab/apputils', () => jest.requireActual('./mocks').apputils());
 */
import { Notification } from '@jupyterlab/apputils';

export const GiB = 1024 ** 3;
export const MiB = 1024 ** 2;
/** The server's clock when the notices were given. */
export const T0 = 1700000000;

/** The mocked notifications, as a spec asserts on them. */
export const notes = Notification as unknown as {
  warning: jest.Mock;
  error: jest.Mock;
  info: jest.Mock;
  dismiss: jest.Mock;
};

/** Each test starts with no notification shown. */
export function clearNotes(): void {
  notes.warning.mockClear();
  notes.error.mockClear();
  notes.info.mockClear();
  notes.dismiss.mockClear();
}
