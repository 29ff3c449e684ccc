"""The self-contained interactive HTML report: one file, every script and style inline
(plotly.js included), that opens offline, zooms, hovers and can be sent on.

One module per view: ``training`` (one step: headline numbers, Gantt chart with the
critical path, memory, idle time by cause), ``compare`` (several schedules on one linked
time axis and a sortable table), ``serving`` (iterations per stage, latency CDFs, batch
size and KV use, every request) and ``plan`` (the Pareto front, the ranked table and the
winner's timeline). ``page`` assembles a file, ``gantt`` draws the WebGL Gantt chart.
Each view returns the page as text; plotly, the optional extra ``pipesim[html]``, is
imported when one is drawn (``page.plotly_missing`` says whether it can be). The four
reports are on ``pipesim.plot``'s front; each caller imports only the view it draws.
"""
