"""The provisioner's helpers, below :mod:`jupyter_vgpu.provisioner` in the layer table: its errors,
the refusal store the REST API reads, jupyter_client workarounds and its settings. The server layer
imports these, never the provisioner itself."""

#: The one variable a launcher's start on the node sets for a kernel that runs elsewhere (its JSON:
#: :class:`.elsewhere.Whereabouts`). Here, so that a kernel of this host can tell it has none
#: without importing the launchers' module at its start.
ENV_ELSEWHERE = "JUPYTER_VGPU_ELSEWHERE"
