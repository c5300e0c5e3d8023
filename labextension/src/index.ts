/**
 * jupyter-vgpu in JupyterLab: the "GPUs" sidebar, the GPU dashboard, the status bar item and
 * their settings; notifications for the line, the watchdog, idle reclaim and bursts asked back;
 * readable refusals; launcher order.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  ICommandPalette,
  IKernelStatusModel,
  ISessionContext,
  Notification
} from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { ISlice, VGPUClient } from './store/api';
import { burstEventAction } from './format/format';
import { addDashboard } from './dashboard/dashboardplugin';
import { gpuIcon } from './icons';
import { BurstNotifier } from './notes/burstnotes';
import { IdleNotifier, keepSlice } from './notes/idlenotes';
import { KernelPickerHints } from './dialogs/kernelpicker';
import { RefusedStarts } from './dialogs/kernelstarts';
import { waitingAlternative } from './store/kernelspecs';
import { KernelspecWatch } from './store/kernelspecwatch';
import { LauncherOrder } from './launcherorder';
import { GPUModel } from './store/model';
import { KernelEnds } from './notes/kernelends';
import { MonitorStops } from './notes/monitorstops';
import { RefusalDialogs } from './dialogs/refusaldialog';
import { ResizedKernelNames } from './store/resized';
import {
  heldBackText,
  ShutDownNotebooks,
  ShutDownReason
} from './notes/shutdownmemory';
import { GPUSidebar } from './sidebar/sidebar';
import {
  GPUStatusItem,
  HostStatusItem,
  KernelSliceModel,
  sessionContextOf
} from './statusbar/statusitem';
import { WaitWatcher } from './notes/waitwatcher';
import { RestartMarks } from './notes/restartmark';
import { WatchdogNotifier } from './notes/watchdognotes';

const PLUGIN_ID = 'jupyter-vgpu:plugin';

namespace CommandIDs {
  export const show = 'vgpu:show-sidebar';
  export const refresh = 'vgpu:refresh';
}

const DEFAULT_INTERVAL_S = 2;

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'GPU slices per kernel: a sidebar and a status bar item.',
  autoStart: true,
  optional: [
    ILayoutRestorer,
    IStatusBar,
    ISettingRegistry,
    ICommandPalette,
    ILabShell,
    IKernelStatusModel
  ],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    labShell: ILabShell | null,
    kernelStatus: IKernelStatusModel | null
  ) => {
    const client = new VGPUClient(app.serviceManager.serverSettings);
    // The one store the sidebar, the status bar and the dashboard read: one poll for all.
    const model = new GPUModel({
      client,
      interval: DEFAULT_INTERVAL_S * 1000
    });
    // The line, the watchdog's, idle reclaim's and bursts' notifications and the launcher order read
    // the slices whatever shows.
    model.subscribe(() => ({}));
    const showSidebar = () => void app.commands.execute(CommandIDs.show);
    /** The notebooks and consoles open in this browser, by path. */
    const openContexts = (): Map<string, ISessionContext> => {
      const contexts = new Map<string, ISessionContext>();
      for (const widget of app.shell.widgets('main')) {
        const context = sessionContextOf(widget);
        if (context?.path) {
          contexts.set(context.path, context);
        }
      }
      return contexts;
    };
    const currentPath = () =>
      sessionContextOf(app.shell.currentWidget)?.path ?? null;
    const line = new WaitWatcher({
      model,
      openPaths: () => new Set(openContexts().keys()),
      showSidebar
    });
    // Notebooks whose kernel was shut down (from the panel, by idle reclaim or by the watchdog's
    // policy) open without one after a reload, saying why.
    const shutDownNotebooks = new ShutDownNotebooks({
      storage: localStorageOrNull(),
      key: `jupyter-vgpu:shut-down:${app.serviceManager.serverSettings.baseUrl}`,
      onHeldBack: (path, why) =>
        Notification.info(heldBackText(path, why), { autoClose: 8000 })
    });
    shutDownNotebooks.follow(app.docRegistry);
    // A notebook whose kernel the server restarted says so in its toolbar until a cell runs.
    const restartMarks = new RestartMarks({
      widgets: () => app.shell.widgets('main')
    });
    new WatchdogNotifier({
      model,
      showSidebar,
      // The server shut a kernel down (idle reclaim, a burst given back, or the admin's
      // policy): JupyterLab learns it now rather than at its next poll of the kernels, so the
      // notebook says "No Kernel"; and a reload does not start the notebook's kernel again on
      // its own (it would take a slice, or a place in line, again).
      onEvent: e => {
        restartMarks.mark(e);
        const burstShutDown =
          e.action === 'burst' && burstEventAction(e) === 'shutdown';
        if (
          e.ok &&
          (e.action === 'idle' || e.action === 'shutdown' || burstShutDown)
        ) {
          if (e.path) {
            shutDownNotebooks.mark(
              e.path,
              burstShutDown ? 'burst' : (e.action as ShutDownReason)
            );
          }
          app.serviceManager.kernels.refreshRunning().catch(console.error);
        }
      }
    });
    // "Keep it" (the notification's, the panel's): the status bar item shows it at once too.
    const keep = async (slice: ISlice): Promise<void> => {
      await keepSlice(model, slice);
      void kernelSlice?.refresh();
    };
    new IdleNotifier({ model, keep, showSidebar });
    // A burst asked back: no "Keep it" (its owner gives it back by freeing memory).
    new BurstNotifier({ model, showSidebar });
    // A refused kernel start, read from JupyterLab's session services (which tell its refusal's
    // id), laid out in the dialog JupyterLab shows for it.
    new RefusalDialogs({
      client,
      refused: new RefusedStarts(app.serviceManager.sessions).refused,
      dialogAdded: Dialog.tracker.widgetAdded,
      currentPath,
      contextFor: path => (path ? (openContexts().get(path) ?? null) : null),
      wasCancelled: path => line.wasCancelled(path),
      // Waiting helps when the GPUs are full (not for a quota, a bad kernelspec or no GPU).
      waitingKernel: refusal =>
        refusal.status === 503 &&
        ['full', 'timed_out'].includes(refusal.reason ?? 'full')
          ? waitingAlternative(
              app.serviceManager.kernelspecs.specs,
              refusal.kernel_name
            )
          : null
    }).start();
    let gpuMemory: number | null = null;
    const launchers = new LauncherOrder({
      kernelspecs: app.serviceManager.kernelspecs,
      gpuMemory: () => gpuMemory
    });
    const scanLaunchers = () => launchers.scan();
    model.changed.connect(() => {
      const snapshot = model.snapshot;
      if (snapshot) {
        launchers.simulated = !!(
          snapshot.slices.simulated || snapshot.devices.simulated
        );
      }
      const memory = (model.snapshot?.devices.devices ?? []).reduce<
        number | null
      >(
        (least, d) =>
          least === null ? d.memory_total : Math.min(least, d.memory_total),
        null
      );
      if (memory !== gpuMemory) {
        gpuMemory = memory; // "8 GiB" and "1/4" compare once the GPUs' size is known
        launchers.update();
      }
    });
    app.shell.currentChanged?.connect(scanLaunchers);
    labShell?.layoutModified.connect(scanLaunchers);
    app.restored.then(scanLaunchers).catch(console.error);

    // GPU hints in JupyterLab's kernel picker; new kernelspecs shown at once, and said.
    new KernelPickerHints({
      model,
      kernelspecs: app.serviceManager.kernelspecs,
      dialogAdded: Dialog.tracker.widgetAdded
    });
    new KernelspecWatch({ model, kernelspecs: app.serviceManager.kernelspecs });
    // A notebook's toolbar and the status bar's kernel item say the size of its kernel's slice
    // after `%vgpu resize`; a `%vgpu monitor` whose kernel restarted says so.
    const mainWidgets = () => app.shell.widgets('main');
    new ResizedKernelNames({
      model,
      kernelspecs: app.serviceManager.kernelspecs,
      widgets: mainWidgets,
      kernelStatus
    });
    const monitors = new MonitorStops({ widgets: mainWidgets });
    // A kernel the server will not start again (its engine ended what held it) says why.
    const ends = new KernelEnds({
      widgets: mainWidgets,
      refusals: since => client.refusals(since)
    });
    const scanMonitors = () => {
      monitors.scan();
      ends.scan();
    };
    app.shell.currentChanged?.connect(scanMonitors);
    labShell?.layoutModified.connect(scanMonitors);
    app.restored.then(scanMonitors).catch(console.error);

    // The GPU dashboard (main area): the command palette and the panel's header open it.
    const openDashboard = addDashboard(app, {
      model,
      palette,
      restorer
    });

    const sidebar = new GPUSidebar({
      model,
      commands: app.commands,
      serviceManager: app.serviceManager,
      cancelWaiting: w => line.cancel(w),
      shutDownNotebooks,
      openDashboard,
      keepSlice: keep
    });
    sidebar.title.caption = 'GPUs';
    app.shell.add(sidebar, 'left', { rank: 750, type: 'GPUs' });
    restorer?.add(sidebar, sidebar.id);
    model.start();

    app.commands.addCommand(CommandIDs.show, {
      label: 'Show GPUs',
      caption: 'Show the GPUs sidebar: slices and usage per kernel',
      icon: gpuIcon,
      execute: () => app.shell.activateById(sidebar.id)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh GPU Usage',
      execute: () => model.refresh()
    });
    palette?.addItem({ command: CommandIDs.show, category: 'GPUs' });
    palette?.addItem({ command: CommandIDs.refresh, category: 'GPUs' });

    let kernelSlice: KernelSliceModel | null = null;
    let showStatusItem = true;
    if (statusBar) {
      kernelSlice = new KernelSliceModel(model, line);
      const item = new GPUStatusItem(kernelSlice, () =>
        app.commands.execute(CommandIDs.show)
      );
      const follow = () => {
        if (kernelSlice) {
          kernelSlice.sessionContext = sessionContextOf(
            app.shell.currentWidget
          );
        }
      };
      app.shell.currentChanged?.connect(follow);
      app.restored.then(follow).catch(console.error);
      statusBar.registerStatusItem(PLUGIN_ID + ':status', {
        item,
        align: 'left',
        rank: 5,
        isActive: () =>
          showStatusItem &&
          (kernelSlice?.slice !== null || kernelSlice?.waiter !== null),
        activeStateChanged: kernelSlice.changed
      });
      // The kernel's CPU and RAM beside its GPU (as jupyter-resource-usage shows them).
      const host = new HostStatusItem(kernelSlice, () =>
        app.commands.execute(CommandIDs.show)
      );
      statusBar.registerStatusItem(PLUGIN_ID + ':host', {
        item: host,
        align: 'left',
        rank: 6,
        isActive: () => showStatusItem && host.hasFigures,
        activeStateChanged: kernelSlice.changed
      });
    }

    if (settingRegistry) {
      const apply = (settings: ISettingRegistry.ISettings) => {
        const seconds = Number(settings.get('refreshInterval').composite);
        const ms =
          Math.max(0.5, isFinite(seconds) ? seconds : DEFAULT_INTERVAL_S) *
          1000;
        model.interval = ms;
        showStatusItem = settings.get('showStatusBarItem').composite !== false;
        void kernelSlice?.refresh(); // shows or hides the item at once
      };
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          apply(settings);
          settings.changed.connect(apply);
        })
        .catch(reason =>
          console.error('jupyter-vgpu: could not load settings.', reason)
        );
    }
  }
};

/** The browser's localStorage, or null where it is refused (a sandboxed frame, privacy settings). */
function localStorageOrNull(): Storage | null {
  try {
    return window.localStorage;
  } catch {
    return null;
  }
}

export default plugin;
