"""Every place the tool looks something up in the environment: the store's location, the
data directory, worker counts, the OpenCode binary, server credentials, the longest
input line, the OpenTelemetry exporter's variables and a table's width (``COLUMNS``).

One rule per fact: a command or a library function that needs an environment variable asks
here, with an ``env`` mapping in tests (``os.environ`` by default)::

    >>> from opencode_events.paths import locate_db
    >>> str(locate_db(env={"OPENCODE_DB": "/tmp/x.db"}))
    '/tmp/x.db'
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from .errors import InputError

__all__ = [
    "data_dir",
    "locate_db",
    "channel_databases",
    "wanted_workers",
    "server_credentials",
    "opencode_binary_override",
    "home",
    "config_home",
    "cache_home",
    "report_cache_dir",
    "state_dir",
    "named_config",
    "MAX_LINE",
    "MAX_LINE_VARIABLE",
    "max_line_setting",
    "parse_size",
    "CACHE_SIZE",
    "CACHE_SIZE_VARIABLE",
    "cache_size_setting",
    "OtlpEnvironment",
    "otlp_environment",
    "login_name",
    "terminal_columns",
]


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/opencode``, or ``~/.local/share/opencode``."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(home(env) / ".local/share")
    return Path(base) / "opencode"


def locate_db(explicit: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The database to read: ``explicit``, ``$OPENCODE_DB`` or the default data path. An
    empty ``explicit`` path is an ``InputError``: ``--db "$UNSET"`` must not read the
    user's own database instead (an empty ``$OPENCODE_DB`` is unset, as in a shell)."""
    env = os.environ if env is None else env
    if explicit is not None:
        if not explicit:
            raise InputError("the database path is empty")
        return Path(explicit)
    named = env.get("OPENCODE_DB")
    if named == ":memory:":  # OpenCode then keeps nothing on disk
        raise InputError(
            "OPENCODE_DB is :memory:, so OpenCode keeps no database to read; pass --db PATH"
        )
    if named:
        path = Path(named)
        # OpenCode resolves a relative OPENCODE_DB against its data directory.
        return path if path.is_absolute() else data_dir(env) / path
    return data_dir(env) / "opencode.db"


def channel_databases(directory: Path) -> list[Path]:
    """``opencode-<channel>.db`` files (dev or preview builds) beside the default one."""
    try:
        return sorted(p for p in directory.glob("opencode-*.db") if p.is_file())
    except OSError:
        return []


def wanted_workers(env: Mapping[str, str] | None = None) -> int | None:
    """``$OPENCODE_EVENTS_WORKERS`` as a positive count, or None when unset or not one."""
    env = os.environ if env is None else env
    wanted = env.get("OPENCODE_EVENTS_WORKERS", "").strip()
    return int(wanted) if wanted.isdigit() and int(wanted) > 0 else None


def server_credentials(env: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(user, password) for ``opencode serve``'s basic auth, as OpenCode's own clients take
    them: ``$OPENCODE_SERVER_USERNAME`` (default ``opencode``), ``$OPENCODE_SERVER_PASSWORD``."""
    env = os.environ if env is None else env
    return (
        env.get("OPENCODE_SERVER_USERNAME") or "opencode",
        env.get("OPENCODE_SERVER_PASSWORD") or None,
    )


def opencode_binary_override(env: Mapping[str, str] | None = None) -> str | None:
    """``$OPENCODE_BIN``: the OpenCode executable ``run`` starts instead of the one on PATH."""
    env = os.environ if env is None else env
    return env.get("OPENCODE_BIN") or None


def home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("HOME") or Path.home())


def config_home(env: Mapping[str, str] | None = None) -> Path:
    """OpenCode's global config folder: ``$XDG_CONFIG_HOME/opencode``."""
    env = os.environ if env is None else env
    return Path(env.get("XDG_CONFIG_HOME") or home(env) / ".config") / "opencode"


def cache_home(env: Mapping[str, str] | None = None) -> Path:
    """OpenCode's cache folder: ``$XDG_CACHE_HOME/opencode`` (its models catalogue)."""
    env = os.environ if env is None else env
    return Path(env.get("XDG_CACHE_HOME") or home(env) / ".cache") / "opencode"


def report_cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """The report cache's folder, ``$XDG_CACHE_HOME/opencode-events`` (``~/.cache/…``); None
    when ``$OPENCODE_EVENTS_NO_CACHE`` is set to anything but ``0`` or nothing."""
    env = os.environ if env is None else env
    if env.get("OPENCODE_EVENTS_NO_CACHE", "").strip() not in ("", "0"):
        return None
    # Our own folder, so the XDG rule: a relative path is ignored (a service started in /
    # would write beside whatever its working folder is). OpenCode's folders above are
    # found as OpenCode finds them.
    chosen = env.get("XDG_CACHE_HOME") or ""
    base = Path(chosen) if os.path.isabs(chosen) else home(env) / ".cache"
    return base / "opencode-events"


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Our state kept across runs, ``$XDG_STATE_HOME/opencode-events`` (``~/.local/state/…``):
    what ``otel --follow`` sent. A relative ``XDG_STATE_HOME`` is ignored, as the cache's."""
    env = os.environ if env is None else env
    chosen = env.get("XDG_STATE_HOME") or ""
    base = Path(chosen) if os.path.isabs(chosen) else home(env) / ".local/state"
    return base / "opencode-events"


def named_config(env: Mapping[str, str] | None = None) -> Path | None:
    """``$OPENCODE_CONFIG``: a config file named in this tool's environment (the agent
    likely shares it)."""
    env = os.environ if env is None else env
    return Path(env["OPENCODE_CONFIG"]) if env.get("OPENCODE_CONFIG") else None


STALE_AFTER_VARIABLE = "OPENCODE_EVENTS_STALE_AFTER"


def stale_after_seconds(env: Mapping[str, str] | None = None) -> float | None:
    """``$OPENCODE_EVENTS_STALE_AFTER``: seconds of silence after which a session in flight
    is stale (``core.activity``); None when unset or empty. A value that is no finite number
    of 0 or more is an ``InputError`` naming the variable, as a bad size is: a typo silently
    taken for the default would make every report's states quietly wrong."""
    env = os.environ if env is None else env
    value = env.get(STALE_AFTER_VARIABLE, "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):  # NaN, infinite (1e400) or negative
        raise InputError(f"{STALE_AFTER_VARIABLE}: not a number of seconds: {value!r} (e.g. 600)")
    return seconds


# The longest line kept: 16 MiB, 200 times OpenCode's largest record in the captures (a
# tool output, which OpenCode caps at 51,200 bytes, written twice); a line of base64 image
# data is the likeliest to come near. What is longer is measured, not kept.
MAX_LINE = 16 << 20
MAX_LINE_VARIABLE = "OPENCODE_EVENTS_MAX_LINE"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}

# The report cache's size: every database's memos, renditions and ledgers together
# (``reports.cache``), the least recently used going first past it. 2 GiB holds the
# reports of a 30 GB database (100,000 sessions) but the per-turn and per-step ones, whose
# rows a repeat reads back (257 MB for both as JSON Lines at 10,000 sessions).
CACHE_SIZE = 2 << 30
CACHE_SIZE_VARIABLE = "OPENCODE_EVENTS_CACHE_SIZE"


def parse_size(text: str) -> int:
    """``"16M"`` → 16 MiB (K, M, G are powers of 1024; a plain number is bytes)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[: len(value) - len(unit)].strip()
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"not a size in bytes: {text!r} (e.g. 16M)")
    return int(number) * _UNITS[unit]


def max_line_setting(env: Mapping[str, str] | None = None) -> int:
    """``$OPENCODE_EVENTS_MAX_LINE`` when set, else ``MAX_LINE``."""
    return _size_setting(MAX_LINE_VARIABLE, MAX_LINE, env)


def cache_size_setting(env: Mapping[str, str] | None = None) -> int:
    """``$OPENCODE_EVENTS_CACHE_SIZE`` when set (``500M``, ``8G``, or bytes), else
    ``CACHE_SIZE``."""
    return _size_setting(CACHE_SIZE_VARIABLE, CACHE_SIZE, env)


def _size_setting(variable: str, default: int, env: Mapping[str, str] | None) -> int:
    """The size ``variable`` names in the environment (``parse_size``), else ``default``;
    one that is no size is an ``InputError`` naming the variable."""
    value = (os.environ if env is None else env).get(variable)
    if not value:
        return default
    try:
        return parse_size(value)
    except ValueError as exc:
        raise InputError(f"{variable}: {exc}") from None


def terminal_columns(env: Mapping[str, str] | None = None) -> int | None:
    """``$COLUMNS`` as a width in terminal cells when it is a positive whole number (a
    table written to a file or a pipe is drawn that wide), else None."""
    value = (os.environ if env is None else env).get("COLUMNS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def github_files(env: Mapping[str, str] | None = None) -> tuple[Path | None, Path | None]:
    """GitHub Actions' ``$GITHUB_STEP_SUMMARY`` (Markdown shown on the run's page) and
    ``$GITHUB_OUTPUT`` (``name=value`` lines a later step reads), each None when unset."""
    env = os.environ if env is None else env
    summary, output = env.get("GITHUB_STEP_SUMMARY"), env.get("GITHUB_OUTPUT")
    return (Path(summary) if summary else None, Path(output) if output else None)


class OtlpEnvironment(NamedTuple):
    """The OpenTelemetry exporter's standard variables, as ``otel`` reads them (each None
    or as set; their meaning is in docs/otel.md)."""

    endpoint: str | None  # OTEL_EXPORTER_OTLP_ENDPOINT: the base URL
    traces_endpoint: str | None  # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: a full URL
    metrics_endpoint: str | None  # OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
    headers: str | None  # OTEL_EXPORTER_OTLP_HEADERS: name=value,…
    compression: str | None  # OTEL_EXPORTER_OTLP_COMPRESSION: gzip or none
    timeout: str | None  # OTEL_EXPORTER_OTLP_TIMEOUT: milliseconds
    protocol: str | None  # OTEL_EXPORTER_OTLP_PROTOCOL: grpc, http/protobuf, http/json
    service_name: str | None  # OTEL_SERVICE_NAME
    resource_attributes: str | None  # OTEL_RESOURCE_ATTRIBUTES: key=value,…
    # OTEL_EXPORTER_OTLP_{TRACES,METRICS}_{HEADERS,…,CLIENT_KEY}, as set:
    # signal → setting ("headers", …) → value
    signals: Mapping[str, Mapping[str, str]] = MappingProxyType({})
    certificate: str | None = None  # OTEL_EXPORTER_OTLP_CERTIFICATE: CA certificates (PEM)
    client_certificate: str | None = None  # OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: mTLS
    client_key: str | None = None  # OTEL_EXPORTER_OTLP_CLIENT_KEY: its private key (PEM)

    def setting(self, signal: str, name: str) -> tuple[str | None, str]:
        """A signal's own setting (``OTEL_EXPORTER_OTLP_TRACES_HEADERS``) over the general
        one (``…_HEADERS``), as the OpenTelemetry spec ranks them; with the variable's name."""
        own = self.signals.get(signal, {}).get(name)
        if own is not None:
            return own, f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name.upper()}"
        return getattr(self, name), f"OTEL_EXPORTER_OTLP_{name.upper()}"


_SIGNAL_SETTINGS = (
    "headers",
    "compression",
    "timeout",
    "protocol",
    "certificate",
    "client_certificate",
    "client_key",
)


def otlp_environment(env: Mapping[str, str] | None = None) -> OtlpEnvironment:
    env = os.environ if env is None else env

    def get(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    signals: dict[str, dict[str, str]] = {}
    for signal in ("traces", "metrics"):
        for setting in _SIGNAL_SETTINGS:
            value = get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{setting.upper()}")
            if value is not None:
                signals.setdefault(signal, {})[setting] = value
    return OtlpEnvironment(
        endpoint=get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        traces_endpoint=get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        metrics_endpoint=get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        headers=get("OTEL_EXPORTER_OTLP_HEADERS"),
        compression=get("OTEL_EXPORTER_OTLP_COMPRESSION"),
        timeout=get("OTEL_EXPORTER_OTLP_TIMEOUT"),
        protocol=get("OTEL_EXPORTER_OTLP_PROTOCOL"),
        service_name=get("OTEL_SERVICE_NAME"),
        resource_attributes=get("OTEL_RESOURCE_ATTRIBUTES"),
        signals=signals,
        certificate=get("OTEL_EXPORTER_OTLP_CERTIFICATE"),
        client_certificate=get("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        client_key=get("OTEL_EXPORTER_OTLP_CLIENT_KEY"),
    )


def login_name() -> str | None:
    """The user running this (``getpass``: ``$LOGNAME``, ``$USER``…, else the password
    database), or None in a container whose uid has no name."""
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return None
