"""Serving: live traffic on pipeline-parallel replicas.

A workload of requests arrives at a router; each replica runs an iteration-level scheduler
(continuous batching, a paged KV cache, preemption by recomputation) over a pipeline of
stages, and every request's life is measured (TTFT, TPOT, end-to-end latency).
"""
