"""Analysis on top of the engine: runs, compare, sweeps, Monte Carlo, critical path."""
