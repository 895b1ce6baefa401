"""The package version, in one place (``opencode_events.__version__``, ``--version``)."""

__version__ = "0.1.0"
