/**
 * After `%vgpu resize`, JupyterLab's own kernel names say the slice's size (issue 41): the
 * notebook's session context answers the new name, and the status bar's kernel item, which
 * reads it only when told, is told to read it again.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { KernelSpec } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { ISlice } from '../store/api';
import { GPUModel } from '../store/model';
import { ResizedKernelNames } from '../store/resized';
import { makeSlice } from './fixtures';

jest.mock('@jupyterlab/apputils', () => ({}));

const QUARTER = {
  name: 'python3-vgpu',
  display_name: 'Python 3 (1/4 GPU)',
  metadata: {
    kernel_provisioner: {
      provisioner_name: 'vgpu-provisioner',
      config: { gpu_fraction: 0.25 }
    }
  }
} as unknown as KernelSpec.ISpecModel;

/** JupyterLab's session context, as far as the names go: a getter on its prototype. */
class FakeContext {
  kernelChanged = { connect: () => undefined };
  session = { kernel: { id: 'k1', name: 'python3-vgpu' } };
  get kernelDisplayName(): string {
    return 'Python 3 (1/4 GPU)';
  }
}

describe('ResizedKernelNames', () => {
  let slice: ISlice;
  let context: FakeContext;
  let status: { addSessionProvider: jest.Mock };
  let names: ResizedKernelNames;

  beforeEach(() => {
    slice = makeSlice({ kernel_id: 'k1' });
    context = new FakeContext();
    status = { addSessionProvider: jest.fn() };
    const widget = {
      node: { querySelector: () => null },
      sessionContext: context
    } as unknown as Widget;
    names = new ResizedKernelNames({
      model: {
        changed: { connect: () => undefined, disconnect: () => undefined },
        kernelSlice: (id: string) => (id === 'k1' ? slice : null)
      } as unknown as GPUModel,
      kernelspecs: {
        specs: { default: 'python3', kernelspecs: { 'python3-vgpu': QUARTER } }
      } as unknown as KernelSpec.IManager,
      widgets: () => [widget],
      kernelStatus: status
    });
  });

  function shown(): string {
    return (context as unknown as ISessionContext).kernelDisplayName;
  }

  it("has the status bar's kernel item read the name again when the slice is resized", () => {
    names.update();
    expect(shown()).toBe('Python 3 (1/4 GPU)');
    status.addSessionProvider.mockClear();
    names.update(); // nothing changed: nothing to read again
    expect(status.addSessionProvider).not.toHaveBeenCalled();

    slice = makeSlice({
      kernel_id: 'k1',
      fraction: 0.5,
      request_text: '1/2 GPU'
    });
    names.update();
    expect(shown()).toBe('Python 3 (1/2 GPU)');
    expect(status.addSessionProvider).toHaveBeenCalled();
    // The provider provides no session: the item keeps the current widget's.
    const provider = status.addSessionProvider.mock.calls[0][0];
    expect(provider(null)).toBeNull();
  });
});
