"""Serving: live traffic on pipeline-parallel replicas (the simulation core).

A workload of requests (``workload``, ``request``) arrives at a router (``router``); each
replica (``replica``, ``deployment``) runs an iteration-level replica scheduler per
virtual engine (``scheduler``; vLLM v0's continuous batching with a paged KV cache and
preemption by recomputation is ``vllm_scheduler``) over a pipeline of stages
(``pipeline``), and ``engine`` plays it out on one SimPy clock. ``recorder`` writes down
what happened (``results``), ``metrics`` summarises it (``report``: TTFT, TPOT, end-to-end
latency, goodput) and ``export`` turns it into CSV text and a Chrome trace.

The core takes plain typed objects, reads no files and knows no scenario schema: building a
deployment from a scenario file and reading arrival traces live in ``pipesim.scenario``
(``serving``, ``serving_links``, ``arrivals``), max-rate search and serving sweeps in
``pipesim.analysis`` (``max_rate``, ``serving_sweep``).
"""
