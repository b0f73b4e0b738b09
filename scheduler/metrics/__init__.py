"""GPU metrics: DCGM through Prometheus (:mod:`.prometheus_reader`, :mod:`.dcgm`), the naming-variant table
(:mod:`.variants`), a simulated dcgm-exporter (:mod:`.exporter`) and kaidash's own metrics (:mod:`.own`).

See ``docs/metrics.md``. Nothing here imports Panel.
"""
