"""The fast evaluator: a deterministic step as one longest-path sweep, without SimPy."""
