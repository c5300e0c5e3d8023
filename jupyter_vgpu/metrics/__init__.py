"""The Prometheus series of a node: their names and labels (the label contract of docs/rest.md,
"Label contract"), the figures they carry from one reading of the GPUs and the ledger, and the
node's own sampler.

Two pages serve them: the node exporter (``jupyter vgpu exporter``: every slice of the node's
ledger) and a user's jupyter_server ``/metrics`` (its own slices). Both build their families here,
so the names, labels and figures cannot drift apart. Nothing here imports jupyter_server.
"""
