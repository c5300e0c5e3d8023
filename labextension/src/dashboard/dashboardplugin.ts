/**
 * The GPU dashboard in JupyterLab: the `vgpu:open-dashboard` command (command palette, GPUs),
 * one dashboard in the main area at a time, reopened by the layout restorer.
 */
import { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';
import {
  ICommandPalette,
  MainAreaWidget,
  WidgetTracker
} from '@jupyterlab/apputils';

import { createDashboard, DASHBOARD_ID, GPUDashboard } from './dashboard';
import { dashboardIcon } from '../icons';
import { GPUModel } from '../store/model';

/** The command that opens (or shows) the dashboard. */
export const OPEN_DASHBOARD = 'vgpu:open-dashboard';

/** The tracker's namespace, under which the layout restorer records the dashboard. */
const NAMESPACE = 'vgpu-dashboard';

export interface IDashboardOptions {
  /** The one store the sidebar and the status bar read too. */
  model: GPUModel;
  palette?: ICommandPalette | null;
  restorer?: ILayoutRestorer | null;
}

/**
 * Register `vgpu:open-dashboard` ("Open GPU dashboard"): it opens the dashboard in the main
 * area, or activates the one already open. Adds it to the palette (category "GPUs") and lets
 * the layout restorer reopen it. Returns the command's id.
 *
 * The command takes `{ activate: false }` to open it without switching to it.
 */
export function addDashboard(
  app: JupyterFrontEnd,
  options: IDashboardOptions
): string {
  const tracker = new WidgetTracker<MainAreaWidget<GPUDashboard>>({
    namespace: NAMESPACE
  });
  app.commands.addCommand(OPEN_DASHBOARD, {
    label: 'Open GPU dashboard',
    caption:
      'GPU memory, utilisation, power, temperature and PCIe throughput per GPU and per slice, over the last hour',
    icon: dashboardIcon,
    execute: args => {
      let widget = tracker.find(w => w.id === DASHBOARD_ID && !w.isDisposed);
      if (!widget) {
        widget = createDashboard(options.model);
        void tracker.add(widget);
      }
      if (!widget.isAttached) {
        app.shell.add(widget, 'main', { activate: args.activate !== false });
      }
      if (args.activate !== false) {
        app.shell.activateById(widget.id);
      }
      return widget;
    }
  });
  options.palette?.addItem({ command: OPEN_DASHBOARD, category: 'GPUs' });
  if (options.restorer) {
    void options.restorer.restore(tracker, {
      command: OPEN_DASHBOARD,
      args: () => ({ activate: false }),
      name: () => NAMESPACE
    });
  }
  return OPEN_DASHBOARD;
}
