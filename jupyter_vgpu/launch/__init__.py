"""The provisioner's helpers, below :mod:`jupyter_vgpu.provisioner` in the layer table: its errors,
the refusal store the REST API reads, jupyter_client workarounds and its settings. The server layer
imports these, never the provisioner itself."""
