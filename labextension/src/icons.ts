import { LabIcon } from '@jupyterlab/ui-components';

import gpuSvg from '../style/icons/gpu.svg';

/** A graphics card; themed through `jp-icon3` like JupyterLab's own icons. */
export const gpuIcon = new LabIcon({
  name: 'jupyter-vgpu:gpu',
  svgstr: gpuSvg
});
