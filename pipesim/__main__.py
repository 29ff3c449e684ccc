"""``python -m pipesim``: the same command line as the ``pipesim`` script."""

from pipesim.cli import main

main(prog_name="pipesim")
