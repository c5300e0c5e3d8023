/**
 * jupyter-vgpu in JupyterLab: the "GPUs" sidebar, the status bar item and their settings.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { VGPUClient } from './api';
import { gpuIcon } from './icons';
import { GPUModel } from './model';
import { GPUSidebar } from './sidebar';
import {
  GPUStatusItem,
  KernelSliceModel,
  sessionContextOf
} from './statusitem';

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
  optional: [ILayoutRestorer, IStatusBar, ISettingRegistry, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null
  ) => {
    const client = new VGPUClient(app.serviceManager.serverSettings);
    const model: GPUModel = new GPUModel({
      client,
      interval: DEFAULT_INTERVAL_S * 1000,
      isVisible: (): boolean => sidebar.isVisible
    });
    const sidebar = new GPUSidebar({
      model,
      commands: app.commands,
      serviceManager: app.serviceManager
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
      kernelSlice = new KernelSliceModel(client, DEFAULT_INTERVAL_S * 1000);
      const item = new GPUStatusItem(kernelSlice, () =>
        app.commands.execute(CommandIDs.show)
      );
      const follow = () => {
        if (kernelSlice) {
          kernelSlice.sessionContext = sessionContextOf(app.shell.currentWidget);
        }
      };
      app.shell.currentChanged?.connect(follow);
      app.restored.then(follow).catch(console.error);
      statusBar.registerStatusItem(PLUGIN_ID + ':status', {
        item,
        align: 'left',
        rank: 5,
        isActive: () => showStatusItem && kernelSlice?.slice !== null,
        activeStateChanged: kernelSlice.changed
      });
    }

    if (settingRegistry) {
      const apply = (settings: ISettingRegistry.ISettings) => {
        const seconds = Number(settings.get('refreshInterval').composite);
        const ms = Math.max(0.5, isFinite(seconds) ? seconds : DEFAULT_INTERVAL_S) * 1000;
        model.interval = ms;
        showStatusItem = settings.get('showStatusBarItem').composite !== false;
        if (kernelSlice) {
          kernelSlice.interval = ms;
          void kernelSlice.refresh();
        }
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

export default plugin;
