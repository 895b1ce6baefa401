"""``python -m opencode_events``: the command line, as the ``opencode-events`` script."""

from .cli import main

main()
