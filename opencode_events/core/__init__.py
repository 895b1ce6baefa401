"""What OpenCode's JSON means: the views of its objects, the mapping table, the normalizer.

Nothing here reads a file, a database or a socket, or writes anything: ``views`` decodes
OpenCode's JSON into small Structs, ``mapping`` is the one table from OpenCode's parts and
tools to our events (with ``bashcmd`` and ``patch`` for the commands and patches it reads),
and ``normalizer`` applies it, numbering events and keeping the metrics.
"""
