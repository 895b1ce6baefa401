"""Test harness: a scripted OpenAI-compatible model server and helpers that drive the
real OpenCode 1.18.33 binary in an isolated environment.  See docs/harness.md."""

from .mock_model import MockModel, default_usage
from .opencode import (
    OPENCODE_VERSION,
    PATCH_MODEL,
    OpenCodeEnv,
    OpenCodeServer,
    RunResult,
    ensure_opencode,
)

__all__ = [
    "OPENCODE_VERSION",
    "PATCH_MODEL",
    "MockModel",
    "OpenCodeEnv",
    "OpenCodeServer",
    "RunResult",
    "default_usage",
    "ensure_opencode",
]
