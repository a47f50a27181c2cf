"""`python -m servebench.cli`: the same command as the `servebench` script."""

from servebench.cli import main

main()
