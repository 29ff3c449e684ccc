"""A seeded fuzz test of every command over every kind of input file and option value.

``corpus`` holds well-formed inputs of each kind (scenarios, serving traces, profiles,
torch CSV schedules, Kineto traces, run files, reports), ``mutate`` damages them,
``cases`` builds one command line per case (with faults: a full disk, a read-only folder,
a FIFO, ``/dev/zero``, an output that is an input), and ``judge`` holds each outcome to
the contract of issue 18.
"""
