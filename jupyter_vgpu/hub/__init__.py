"""JupyterHub integration: the node broker, per-user/group GPU quotas, the admin page.

In ``jupyterhub_config.py``::

    from jupyter_vgpu.hub import configure
    c.VGPUPolicy.default = {"max_per_kernel": "1/2", "max_slices": 2}
    c.VGPUPolicy.groups = {"students": {"max_per_kernel": "1/4", "max_total": "1/2"}}
    configure(c, __file__)

``configure`` runs ``jupyter vgpu broker`` as a managed service (it reads ``c.VGPUPolicy`` from
this very file, and again whenever the file changes), serves the admin page at
``/services/vgpu/`` and points every single-user server at the broker's socket.
"""

from __future__ import annotations

from .._extras import require

# Everything in this package serves JupyterHub (the broker is a hub service, the admin page
# uses its OAuth); without the [hub] extra, importing it says so in one sentence.
require("jupyterhub", extra="hub", feature="jupyter-vgpu's JupyterHub integration (broker, quotas, admin page)")

from .integration import configure  # noqa: E402
from .policy import Policy, VGPUPolicy, load_policy  # noqa: E402

__all__ = ["Policy", "VGPUPolicy", "configure", "load_policy"]
