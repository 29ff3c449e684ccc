"""Matplotlib figures: Gantt charts, memory panels, sweeps and cross-checks."""
