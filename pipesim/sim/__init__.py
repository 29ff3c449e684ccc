"""Simulation: costs, links, the SimPy engine, the Trace and the Report."""
