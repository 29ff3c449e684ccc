"""The schedule policies: one module per policy."""
