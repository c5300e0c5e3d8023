/**
 * Stand-ins for JupyterLab's widget and icon packages, which are ES modules that need a DOM:
 * the views these tests render to HTML need neither. Use them in a test file as
 * `jest.mock('@jupyterlab/ui-components', () => jest.requireActual('./mocks').uiComponents())`.
 */

const icon = { react: () => null };

/** `@jupyterlab/ui-components`: icons that draw nothing, a widget class that is never shown. */
export function uiComponents(): object {
  return {
    ReactWidget: class {},
    UseSignal: () => null,
    caretDownIcon: icon,
    caretRightIcon: icon,
    closeIcon: icon,
    copyIcon: icon,
    kernelIcon: icon,
    refreshIcon: icon,
    terminalIcon: icon
  };
}

/** `../icons`: this extension's own icons. */
export function icons(): object {
  return { dashboardIcon: icon, gpuIcon: icon };
}

/** `@jupyterlab/apputils` with notifications that return an id each ("note-1", ...): the
 * notice specs assert on them through `./noticesetup`'s `notes`. */
export function apputils(): object {
  let next = 0;
  return {
    Dialog: { okButton: () => ({}) },
    showDialog: jest.fn(),
    Notification: {
      warning: jest.fn(() => `note-${++next}`),
      error: jest.fn(() => `note-${++next}`),
      info: jest.fn(() => `note-${++next}`),
      dismiss: jest.fn()
    }
  };
}
