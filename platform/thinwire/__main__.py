"""`python -m thinwire` runs the `thinwire` command."""

from thinwire.cli import main

main()
