"""``python -m pev``: the `pev` command line, for where its script is not on the path."""

from pev.cli import main

main()
