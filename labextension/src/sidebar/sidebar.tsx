/**
 * The "GPUs" panel in the left area: one card per GPU, one row per slice.
 */
import {
  Clipboard,
  Dialog,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { ServiceManager } from '@jupyterlab/services';
import { ReactWidget, refreshIcon, UseSignal } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import * as React from 'react';

import { IGateway, ISlice, IWaiting } from '../store/api';
import { BarLegend } from './bars';
import { DeviceCard } from './devicecard';
import {
  elasticOf,
  gatewayText,
  holderLabel,
  machineGlance
} from '../format/format';
import { dashboardIcon, gpuIcon } from '../icons';
import { keepSlice } from '../notes/idlenotes';
import { GPUModel } from '../store/model';
import { sliceKernelName } from '../store/resized';
import { ShutDownNotebooks } from '../notes/shutdownmemory';
import { IHistorySource, ISliceActions } from './slicerow';
import { ElsewhereCards } from './elsewhere';
import { IWaitingActions, WaitingList } from './waiting';

/** The GPU node the server uses through `--gateway-url`, as the latest replies name it. */
function gatewayOf(snapshot: GPUModel['snapshot']): IGateway | null {
  return snapshot?.slices.gateway ?? snapshot?.devices.gateway ?? null;
}

function Header(props: {
  model: GPUModel;
  openDashboard: (() => void) | null;
}): JSX.Element {
  const { model, openDashboard } = props;
  const snapshot = model.snapshot;
  const count = snapshot?.devices.devices.length ?? 0;
  const gateway = gatewayOf(snapshot);
  const machine = machineGlance(snapshot?.devices.host);
  return (
    <div className="jp-vgpu-Header">
      <h2 className="jp-vgpu-Header-title">GPUs</h2>
      {snapshot?.devices.simulated && (
        <span
          className="jp-vgpu-Chip jp-vgpu-mod-simulated"
          title="These GPUs are simulated (JUPYTER_VGPU_SIMULATE): no real hardware is used."
        >
          simulated
        </span>
      )}
      {snapshot && snapshot.devices.available && (
        <span className="jp-vgpu-Header-count">
          {count === 1 ? '1 GPU' : `${count} GPUs`}
        </span>
      )}
      <span className="jp-vgpu-Header-buttons">
        {openDashboard && (
          <button
            className="jp-Button jp-mod-minimal jp-vgpu-Header-dashboard"
            title="Open GPU dashboard: memory, utilisation, power, temperature and PCIe over the last hour"
            aria-label="Open GPU dashboard"
            onClick={openDashboard}
          >
            <dashboardIcon.react tag="span" elementSize="normal" />
          </button>
        )}
        <button
          className="jp-Button jp-mod-minimal jp-vgpu-Header-refresh"
          title="Refresh"
          aria-label="Refresh"
          onClick={() => void model.refresh()}
        >
          <refreshIcon.react tag="span" elementSize="normal" />
        </button>
      </span>
      {machine && (
        <div
          className="jp-vgpu-Header-host"
          title={`${gateway ? 'The GPU node' : 'This machine'}, as a whole: CPU busy (all cores) and memory in use`}
        >
          <span className="jp-vgpu-Header-hostLabel">
            {gateway ? 'GPU node' : 'Host'}
          </span>{' '}
          {machine.split(' · ').map((part, i) => (
            <React.Fragment key={i}>
              {i > 0 && ' · '}
              <span className="jp-vgpu-Header-hostPart">{part}</span>
            </React.Fragment>
          ))}
        </div>
      )}
      {gateway && (
        <div
          className="jp-vgpu-Header-node"
          title={`Kernels and GPUs are on the GPU node behind --gateway-url=${gateway.url}`}
        >
          {gatewayText(gateway)}
        </div>
      )}
    </div>
  );
}

function Message(props: {
  kind: 'loading' | 'error' | 'no-gpu' | 'empty';
  title: string;
  children?: React.ReactNode;
}): JSX.Element {
  return (
    <div className={`jp-vgpu-Message jp-vgpu-mod-${props.kind}`} role="status">
      <p className="jp-vgpu-Message-title">{props.title}</p>
      {props.children}
    </div>
  );
}

/**
 * The panel under its header: the GPUs and their slices, a card per launcher whose kernels run
 * elsewhere, the line (exported for tests).
 */
export function Body(props: {
  model: GPUModel;
  actions: ISliceActions;
  waitingActions: IWaitingActions;
  history: IHistorySource;
}): JSX.Element {
  const { model, actions, waitingActions, history } = props;
  const snapshot = model.snapshot;
  const error = model.error;
  // A CPU-only server using a GPU node (`--gateway-url`): the node is what does not answer.
  const remote =
    gatewayOf(snapshot) !== null || /^GPU node /.test(error?.message ?? '');
  const banner = error && (
    <Message
      kind="error"
      title={
        remote
          ? 'The GPU node does not answer.'
          : 'The GPU server extension does not answer.'
      }
    >
      <p className="jp-vgpu-Message-detail">{error.message}</p>
      <p className="jp-vgpu-Message-detail">
        Retrying less often until it answers.{' '}
        <button
          className="jp-vgpu-mod-link"
          onClick={() => void model.refresh()}
        >
          Retry now
        </button>
      </p>
    </Message>
  );
  if (!snapshot) {
    return banner || <Message kind="loading" title="Reading the GPUs…" />;
  }
  const { devices, slices } = snapshot;
  // A kernel that runs elsewhere is on its launcher's GPU, never on this server's.
  const local = slices.slices.filter(s => !s.elsewhere);
  const allWaiting = slices.waiting ?? [];
  const waiting = allWaiting.filter(w => !w.elsewhere);
  const launchers = slices.launchers ?? [];
  const elsewhere = (
    <ElsewhereCards
      slices={slices.slices}
      waiting={allWaiting}
      launchers={launchers}
      taken={snapshot.taken}
      colour={id => model.colour(id)}
      actions={actions}
      waitingActions={waitingActions}
    />
  );
  const line = (
    <WaitingList
      waiting={waiting}
      taken={snapshot.taken}
      actions={waitingActions}
    />
  );
  if (!devices.available) {
    // Where this server's GPU kernels run instead, in each launcher's words.
    const runs = launchers.filter(l => l.runs);
    return (
      <>
        {banner}
        {runs.length > 0 ? (
          <Message kind="no-gpu" title="No GPU on this server.">
            {runs.map(l => (
              <p key={l.name} className="jp-vgpu-Message-detail">
                {l.runs}
                {l.kernelspecs.length > 0 && (
                  <>: start {kernelList(l.kernelspecs)} from the launcher</>
                )}
                .
              </p>
            ))}
          </Message>
        ) : (
          <Message kind="no-gpu" title="No GPU on this server.">
            {devices.message && (
              <p className="jp-vgpu-Message-detail">{devices.message}</p>
            )}
            <p className="jp-vgpu-Message-detail">
              Kernels run on the CPU. To try jupyter-vgpu anyway, start the
              server with JUPYTER_VGPU_SIMULATE=2x16GiB.
            </p>
          </Message>
        )}
        {elsewhere}
        {line}
      </>
    );
  }
  const byCreation = [...local].sort((a, b) => a.created - b.created);
  return (
    <>
      {banner}
      {slices.slices.length === 0 && allWaiting.length === 0 && (
        <Message kind="empty" title="No kernel holds a GPU slice.">
          <p className="jp-vgpu-Message-detail">
            Start a sliced kernel such as “Python 3 (1/4 GPU)” from the
            launcher, or run a command with{' '}
            <code>jupyter vgpu run -p 0.25 -- python train.py</code>.
          </p>
        </Message>
      )}
      {devices.devices.length > 0 && (
        // The burst and the request's mark, once an elastic slice is there to draw them.
        <BarLegend elastic={local.some(s => elasticOf(s) !== null)} />
      )}
      {devices.devices.map(device => (
        <DeviceCard
          key={device.uuid}
          device={device}
          slices={byCreation.filter(
            s =>
              s.gpu_indices.includes(device.index) ||
              s.gpus.includes(device.uuid)
          )}
          colour={id => model.colour(id)}
          actions={actions}
          history={history}
          received={snapshot.taken}
        />
      ))}
      {elsewhere}
      {line}
    </>
  );
}

/** “Python 3 (1/4 GPU, Slurm)”, or the first two of several and how many more. */
function kernelList(names: string[]): string {
  const quoted = names.slice(0, 2).map(n => `“${n}”`);
  const more = names.length - quoted.length;
  return more > 0
    ? `${quoted.join(', ')} or ${more} more`
    : quoted.join(' or ');
}

/**
 * The sidebar widget. It renders whatever the model holds and turns row actions into
 * JupyterLab commands and services calls, so the rest of the UI updates natively.
 */
export class GPUSidebar extends ReactWidget {
  constructor(options: GPUSidebar.IOptions) {
    super();
    this.model = options.model;
    this._commands = options.commands;
    this._services = options.serviceManager;
    this._shutDown = options.shutDownNotebooks ?? null;
    const dashboard = options.openDashboard;
    this._openDashboard = dashboard
      ? () => void this._commands.execute(dashboard)
      : null;
    this._history = {
      slice: id => this.model.sliceHistory(id),
      device: uuid => this.model.deviceHistory(uuid),
      now: () => this.model.serverNow()
    };
    this._waitingActions = {
      cancel: w => void options.cancelWaiting(w),
      openNotebook: path =>
        void this._commands.execute('docmanager:open', { path })
    };
    // The GPUs are read only while the panel shows (the slices always are: see index.ts).
    this._unsubscribe = this.model.subscribe(() =>
      this.isVisible ? { devices: true } : null
    );
    this.id = 'jupyter-vgpu-sidebar';
    this.addClass('jp-vgpu-Sidebar');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPUs: slices and usage per kernel';
    this._actions = {
      openNotebook: path =>
        void this._commands.execute('docmanager:open', { path }),
      kernelDisplayName: slice => {
        const spec = slice.kernel_name
          ? this._services.kernelspecs.specs?.kernelspecs[slice.kernel_name]
          : undefined;
        const name =
          slice.kernel_display_name ??
          spec?.display_name ??
          slice.kernel_name ??
          'kernel';
        // After `%vgpu resize`, the size the slice has now, not the kernelspec's.
        return sliceKernelName(name, slice, spec).name;
      },
      shutdownKernel: slice => void this._shutdownKernel(slice),
      releaseSlice: slice => void this._releaseSlice(slice),
      copySliceId: slice => {
        Clipboard.copyToSystem(slice.id);
        Notification.info(`Copied slice id ${slice.id}`, { autoClose: 2000 });
      },
      keepSlice: slice =>
        void (options.keepSlice
          ? options.keepSlice(slice)
          : keepSlice(this.model, slice)),
      cancelJob: slice => void this._cancelJob(slice)
    };
  }

  readonly model: GPUModel;

  /** Cancel an ending kernel's job elsewhere now (the server retries it anyway); say the answer. */
  private async _cancelJob(slice: ISlice): Promise<void> {
    const name = slice.elsewhere?.name ?? `slice ${slice.id}`;
    try {
      await this.model.client.cancelWaiting(slice.elsewhere?.id ?? slice.id);
      Notification.info(`${name} is cancelled.`, {
        autoClose: 4000
      });
    } catch (error) {
      Notification.warning(
        `${name} is not cancelled yet: ${error instanceof Error ? error.message : String(error)}`,
        { autoClose: 8000 }
      );
    }
    await this.model.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._unsubscribe();
    super.dispose();
  }

  protected onAfterShow(): void {
    void this.model.refresh();
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => (
          <div className="jp-vgpu-Sidebar-content">
            <Header model={this.model} openDashboard={this._openDashboard} />
            <div className="jp-vgpu-Sidebar-body">
              <Body
                model={this.model}
                actions={this._actions}
                waitingActions={this._waitingActions}
                history={this._history}
              />
            </div>
          </div>
        )}
      </UseSignal>
    );
  }

  private async _shutdownKernel(slice: ISlice): Promise<void> {
    const kernelId = slice.kernel_id;
    if (!kernelId) {
      return;
    }
    const result = await showDialog({
      title: 'Shut down kernel?',
      body: `Shut down the kernel of ${holderLabel(slice)} (${this._actions.kernelDisplayName(slice)})? ${slice.elsewhere ? `${slice.elsewhere.name} is cancelled` : 'Its GPU slice is released'} and unsaved variables are lost.`,
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({ label: 'Shut Down' })
      ]
    });
    if (!result.button.accept) {
      return;
    }
    // A page reload must not start this notebook's kernel again on its own.
    const path = slice.path?.endsWith('.ipynb') ? slice.path : null;
    this._shutDown?.mark(path);
    try {
      // The kernels service tells every session and notebook using this kernel.
      await this._services.kernels.shutdown(kernelId);
    } catch (error) {
      this._shutDown?.forget(path);
      await showDialog({
        title: 'Could not shut down the kernel',
        body: String(error),
        buttons: [Dialog.okButton()]
      });
    }
    await this.model.refresh();
  }

  private async _releaseSlice(slice: ISlice): Promise<void> {
    const result = await showDialog({
      title: 'Release slice?',
      body: `Release slice ${slice.id} of “${holderLabel(slice)}”? The command keeps running, but its memory is no longer reserved and another kernel may take it.`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Release' })]
    });
    if (!result.button.accept) {
      return;
    }
    try {
      await this.model.client.release(slice.id);
    } catch (error) {
      await showDialog({
        title: 'Could not release the slice',
        body: String(error instanceof Error ? error.message : error),
        buttons: [Dialog.okButton()]
      });
    }
    await this.model.refresh();
  }

  private _actions: ISliceActions;
  private _commands: CommandRegistry;
  private _history: IHistorySource;
  private _openDashboard: (() => void) | null;
  private _services: ServiceManager.IManager;
  private _shutDown: ShutDownNotebooks | null;
  private _unsubscribe: () => void;
  private _waitingActions: IWaitingActions;
}

export namespace GPUSidebar {
  export interface IOptions {
    model: GPUModel;
    commands: CommandRegistry;
    serviceManager: ServiceManager.IManager;
    /** Take a request out of the line. */
    cancelWaiting: (w: IWaiting) => Promise<void>;
    /** Where kernels shut down from the panel are remembered (so a reload does not restart them). */
    shutDownNotebooks?: ShutDownNotebooks;
    /** The command that opens the GPU dashboard (a header button runs it), if any. */
    openDashboard?: string;
    /** "Keep it" for an idle slice (default: `keepSlice` with this panel's model). */
    keepSlice?: (slice: ISlice) => Promise<void>;
  }
}
