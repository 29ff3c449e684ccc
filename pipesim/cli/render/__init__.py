"""Everything a command shows, rendered in memory: one module per command family.

A renderer takes what the library returned and gives text or bytes (a table, JSON, CSV, a
figure's file content); ``pipesim.cli.output`` writes them. No command module prints.
"""
