"""Server layer: the jupyter_server extension (REST API, usage monitor, watchdog, metrics).

Imported only by Jupyter Server; nothing below this layer imports it.
"""
