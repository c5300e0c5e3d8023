import { LabIcon } from '@jupyterlab/ui-components';

import dashboardSvg from '../style/icons/dashboard.svg';
import gpuSvg from '../style/icons/gpu.svg';

/** A graphics card; themed through `jp-icon3` like JupyterLab's own icons. */
export const gpuIcon = new LabIcon({
  name: 'jupyter-vgpu:gpu',
  svgstr: gpuSvg
});

/** A line chart: the GPU dashboard. */
export const dashboardIcon = new LabIcon({
  name: 'jupyter-vgpu:dashboard',
  svgstr: dashboardSvg
});
