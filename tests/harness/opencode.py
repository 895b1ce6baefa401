"""Install, configure and drive the real OpenCode binary (pinned 1.18.33).

Standard library only.  See docs/harness.md.

* :func:`ensure_opencode` installs ``opencode-ai@1.18.33`` from npm into
  ``<repo>/.cache/opencode-1.18.33/`` (once; guarded by a file lock) and
  returns the binary's path.  It raises ``RuntimeError`` with the reason when
  it cannot -- it never skips silently.
* :class:`OpenCodeEnv` is an isolated world: HOME and every XDG dir live in one
  temp root, a git-initialised work directory with a deterministic first
  commit, a global ``opencode.json`` that points a custom provider at the mock
  model server.  It runs ``opencode run``, ``opencode export``, starts
  ``opencode serve`` (:class:`OpenCodeServer`), and copies the database out
  with SQLite's backup API.

Every process started here is stopped in ``finally``/``__exit__``.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPENCODE_VERSION = "1.18.33"
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / f"opencode-{OPENCODE_VERSION}"
BIN_REL = Path("node_modules/opencode-linux-x64/bin/opencode")

PROVIDER_ID = "mock"
DEFAULT_MODEL = "mock-model"
PATCH_MODEL = "gpt-5-mock"  # model ids containing "gpt-" get apply_patch instead of edit/write

# Environment that keeps OpenCode offline, quiet and deterministic.
QUIET_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",  # no models.dev download
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # ignore ~/.claude prompts/skills
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    # OpenCode tries `npm` for config-dir plugin deps (@opencode-ai/plugin); point
    # npm at a dead loopback port so nothing leaves the machine.  The provider
    # package @ai-sdk/openai-compatible is bundled in the binary (no download).
    "npm_config_registry": "http://127.0.0.1:9/",
    "npm_config_offline": "true",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "TZ": "UTC",
    "LANG": "C.UTF-8",
}


class HarnessError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------
# installation


def _bin_ok(path: Path, version: str = OPENCODE_VERSION) -> bool:
    if not path.is_file() or not os.access(path, os.X_OK):
        return False
    try:
        out = subprocess.run(
            [str(path), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()},
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def ensure_opencode(cache_dir: Path | None = None, version: str = OPENCODE_VERSION) -> Path:
    """Install the pinned OpenCode (idempotent) and return the binary path; ``version``
    another release (the legacy captures: the JSON files 1.1.x wrote, 1.2.x's database),
    under ``.cache/opencode-<version>/`` beside the pinned one.

    Raises RuntimeError explaining why if it cannot be installed.
    """
    env_bin = os.environ.get("OPENCODE_EVENTS_OPENCODE_BIN")
    if version != OPENCODE_VERSION:
        env_bin = None  # that variable names the pinned release
        if cache_dir is None:
            root = os.environ.get("OC_CAPTURE_CACHE")  # where older releases are kept
            cache_dir = (Path(root) if root else CACHE_DIR.parent) / f"opencode-{version}"
    if env_bin:
        p = Path(env_bin)
        if not _bin_ok(p):
            raise RuntimeError(
                f"OPENCODE_EVENTS_OPENCODE_BIN={env_bin} is not an opencode "
                f"{OPENCODE_VERSION} binary"
            )
        return p
    cache_dir = Path(cache_dir or CACHE_DIR)
    binary = cache_dir / BIN_REL
    if _bin_ok(binary, version):
        return binary
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    lock_path = cache_dir.parent / f".opencode-{version}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing
        try:
            if _bin_ok(binary, version):
                return binary
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError(
                    f"cannot install opencode-ai@{version}: `npm` is not on PATH "
                    "(install Node.js/npm, or set OPENCODE_EVENTS_OPENCODE_BIN to an opencode "
                    f"{version} binary)"
                )
            cache_dir.mkdir(parents=True, exist_ok=True)
            cmd = [
                npm,
                "install",
                "--no-save",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--prefix",
                str(cache_dir),
                f"opencode-ai@{version}",
            ]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired as e:
                raise RuntimeError(f"`{' '.join(cmd)}` timed out after 600 s") from e
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout)[-2000:]
                raise RuntimeError(
                    f"`{' '.join(cmd)}` failed with exit code {proc.returncode}:\n{tail}"
                )
            if not binary.is_file():
                raise RuntimeError(
                    f"npm installed opencode-ai@{version} but {binary} is missing "
                    "(only linux-x64 is supported by this harness)"
                )
            if not _bin_ok(binary, version):
                raise RuntimeError(f"{binary} does not report version {version}")
            return binary
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------
# results


@dataclass
class RunResult:
    args: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes
    duration: float

    @property
    def records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.stdout.decode("utf-8", "replace").splitlines():
            line = line.strip()
            if line:
                out.append(json.loads(line))
        return out

    @property
    def types(self) -> list[str]:
        return [r.get("type") for r in self.records]

    @property
    def session_id(self) -> str | None:
        for r in self.records:
            if r.get("sessionID"):
                return r["sessionID"]
        return None

    def tool_uses(self) -> list[dict[str, Any]]:
        return [r["part"] for r in self.records if r.get("type") == "tool_use"]


# --------------------------------------------------------------------------------------
# environment


GIT_ENV = {
    "GIT_AUTHOR_NAME": "Harness",
    "GIT_AUTHOR_EMAIL": "harness@example.invalid",
    "GIT_COMMITTER_NAME": "Harness",
    "GIT_COMMITTER_EMAIL": "harness@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


class OpenCodeEnv:
    """An isolated OpenCode world in ``root`` (HOME, XDG dirs, a work directory)."""

    def __init__(
        self,
        binary: Path | str,
        root: Path | str | None = None,
        *,
        base_url: str | None = None,
        model: str = DEFAULT_MODEL,
        config: dict[str, Any] | None = None,
        files: dict[str, str] | None = None,
        git: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.binary = str(binary)
        self._own_root = root is None
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="oc-env-"))
        if self.root.exists() and not self._own_root:
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.home = self.root / "home"
        self.xdg = {
            k: self.root / v
            for k, v in (
                ("XDG_DATA_HOME", "data"),
                ("XDG_CONFIG_HOME", "config"),
                ("XDG_STATE_HOME", "state"),
                ("XDG_CACHE_HOME", "cache"),
                ("XDG_RUNTIME_DIR", "runtime"),
            )
        }
        self.work = self.root / "work"
        for d in (self.home, self.work, *self.xdg.values()):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.xdg["XDG_RUNTIME_DIR"], 0o700)
        self.config_dir = self.xdg["XDG_CONFIG_HOME"] / "opencode"
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.xdg["XDG_DATA_HOME"] / "opencode"
        self.model = model
        self.base_url = base_url
        self.extra_config = config or {}
        self.extra_env = dict(extra_env or {})
        for rel, content in (files or {}).items():
            p = self.work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(content)
        if git:
            self._git_init()
        if base_url:
            self.write_config()

    # -- setup -------------------------------------------------------------------------
    def _git(self, *args: str) -> None:
        subprocess.run(
            ["git", *args],
            cwd=self.work,
            check=True,
            capture_output=True,
            env={**self.env, **GIT_ENV},
        )

    def _git_init(self) -> None:
        self._git("init", "-q", "-b", "main")
        self._git("config", "commit.gpgsign", "false")
        self._git("add", "-A")
        self._git("commit", "-q", "--allow-empty", "-m", "initial")

    def config_dict(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "provider": {
                PROVIDER_ID: {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Mock provider",
                    "options": {"baseURL": self.base_url, "apiKey": "sk-mock-not-a-secret"},
                    "models": {
                        # Prices (USD per million tokens) so OpenCode computes real costs.
                        DEFAULT_MODEL: {
                            "name": "Mock model",
                            "limit": {"context": 200000, "output": 8192},
                            "cost": {
                                "input": 3,
                                "output": 15,
                                "cache_read": 0.3,
                                "cache_write": 3.75,
                            },
                        },
                        PATCH_MODEL: {
                            "name": "Mock gpt-5 (apply_patch)",
                            "limit": {"context": 200000, "output": 8192},
                            "cost": {"input": 1.25, "output": 10, "cache_read": 0.125},
                        },
                    },
                }
            },
            "model": f"{PROVIDER_ID}/{self.model}",
            "small_model": f"{PROVIDER_ID}/{DEFAULT_MODEL}",
        }
        _deep_merge(cfg, self.extra_config)
        return cfg

    def write_config(self, base_url: str | None = None) -> Path:
        if base_url:
            self.base_url = base_url
        path = self.config_dir / "opencode.json"
        path.write_text(json.dumps(self.config_dict(), indent=2) + "\n")
        return path

    @property
    def env(self) -> dict[str, str]:
        e = {
            "HOME": str(self.home),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "TMPDIR": str(self.root / "tmp"),
            **{k: str(v) for k, v in self.xdg.items()},
            **QUIET_ENV,
        }
        (self.root / "tmp").mkdir(exist_ok=True)
        e.update(self.extra_env)
        return e

    @property
    def db_path(self) -> Path:
        return self.data_dir / "opencode.db"

    # -- running -----------------------------------------------------------------------
    def command(self, *args: str) -> list[str]:
        return [self.binary, *args]

    def run(
        self,
        *prompt: str,
        args: list[str] | None = None,
        model: str | None = None,
        fmt: str = "json",
        timeout: float = 120,
        stdin: bytes | None = None,
    ) -> RunResult:
        """``opencode run --format json -m mock/<model> [args] <prompt words...>``.

        Prompt words are passed as separate argv items (a word containing a
        space would be stored wrapped in literal quotes by OpenCode).
        """
        argv = self.command(
            "run",
            "--format",
            fmt,
            "-m",
            f"{PROVIDER_ID}/{model or self.model}",
            *(args or []),
            *prompt,
        )
        return self._run(argv, timeout=timeout, stdin=stdin)

    def _run(
        self,
        argv: list[str],
        *,
        timeout: float = 120,
        stdin: bytes | None = None,
        stdout_to_file: bool = False,
    ) -> RunResult:
        # A file, not a pipe, for commands that print one large document and exit: `opencode
        # export` into a pipe stops at 64 KiB (the process exits before its output drains).
        with tempfile.TemporaryFile() if stdout_to_file else contextlib.nullcontext() as sink:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                argv,
                cwd=self.work,
                env=self.env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=sink if sink is not None else subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            try:
                out, err = proc.communicate(stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                out, err = proc.communicate()
                raise HarnessError(
                    f"{argv[1:3]} timed out after {timeout}s; stderr tail: {err[-2000:]!r}"
                ) from None
            finally:
                _kill_group(proc)
            if sink is not None:
                sink.seek(0)
                out = sink.read()
        return RunResult(argv, proc.returncode, out, err, time.monotonic() - t0)

    def run_interrupted(
        self,
        *prompt: str,
        when: Any,
        args: list[str] | None = None,
        model: str | None = None,
        timeout: float = 60,
        grace: float = 20,
        group: bool = True,
        sig: int = signal.SIGINT,
    ) -> RunResult:
        """Start a run and send SIGINT once ``when(stdout_so_far)`` returns true.

        ``group=True`` signals the whole process group (what Ctrl-C in a terminal
        does: opencode and the tool's shell both get it); ``False`` only opencode.
        """
        argv = self.command(
            "run",
            "--format",
            "json",
            "-m",
            f"{PROVIDER_ID}/{model or self.model}",
            *(args or []),
            *prompt,
        )
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        out_chunks: list[bytes] = []
        err_chunks: list[bytes] = []
        readers = [
            threading.Thread(target=_drain, args=(proc.stdout, out_chunks), daemon=True),
            threading.Thread(target=_drain, args=(proc.stderr, err_chunks), daemon=True),
        ]
        for t in readers:
            t.start()
        try:
            deadline = t0 + timeout
            while time.monotonic() < deadline and proc.poll() is None:
                if when(b"".join(out_chunks)):
                    if group:
                        os.killpg(proc.pid, sig)  # the group we created for this run
                    else:
                        proc.send_signal(sig)
                    break
                time.sleep(0.05)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        finally:
            _kill_group(proc)
            for t in readers:
                t.join(timeout=5)
        return RunResult(
            argv, proc.returncode, b"".join(out_chunks), b"".join(err_chunks), time.monotonic() - t0
        )

    def export(self, session_id: str, *extra: str) -> RunResult:
        return self._run(
            self.command("export", session_id, *extra), timeout=60, stdout_to_file=True
        )

    def session_ids(self) -> list[dict[str, Any]]:
        """Sessions in the store (read-only peek), oldest first."""
        if not self.db_path.exists():
            return []
        con = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        try:
            rows = con.execute(
                "select id, parent_id, title from session order by time_created, id"
            ).fetchall()
        finally:
            con.close()
        return [{"id": r[0], "parent_id": r[1], "title": r[2]} for r in rows]

    def copy_db(self, dest: Path | str, vacuum: bool = True) -> Path:
        """A consolidated single-file copy of opencode.db (backup API, WAL folded in)."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest.unlink()
        src = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        dst = sqlite3.connect(dest)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")
            if vacuum:
                dst.execute("VACUUM")
            dst.commit()
        finally:
            dst.close()
            src.close()
        return dest

    @contextlib.contextmanager
    def serve(self, port: int | None = None, *, timeout: float = 30) -> Iterator[OpenCodeServer]:
        server = OpenCodeServer(self, port or free_port())
        try:
            server.start(timeout=timeout)
            yield server
        finally:
            server.stop()

    def cleanup(self) -> None:
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> OpenCodeEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def _drain(stream: Any, sink: list[bytes]) -> None:
    try:
        while True:
            b = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not b:
                break
            sink.append(b)
    except (OSError, ValueError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop a process we started (and its process group, which we created)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    else:
        # the leader is gone; make sure no child (e.g. a bash tool) outlives it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = v


# --------------------------------------------------------------------------------------
# server


class SSECapture:
    """Reads an SSE endpoint on a thread, keeping the raw bytes and parsed frames."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port, self.path = host, port, path
        self.raw = bytearray()
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._conn: http.client.HTTPConnection | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"sse{path}")
        self.connected = threading.Event()
        self.closed = threading.Event()
        self.error: BaseException | None = None

    def start(self) -> SSECapture:
        self._thread.start()
        if not self.connected.wait(15):
            raise HarnessError(f"SSE {self.path} did not connect: {self.error!r}")
        # The response headers come before OpenCode subscribes the stream to its bus: wait
        # for its first frame (server.connected), or events sent meanwhile are missing.
        with self._cond:
            deadline = time.monotonic() + 10
            while not self.events and not self.closed.is_set() and time.monotonic() < deadline:
                self._cond.wait(0.1)
        return self

    def _loop(self) -> None:
        buf = b""
        try:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
            self._conn.request("GET", self.path, headers={"Accept": "text/event-stream"})
            resp = self._conn.getresponse()
            if resp.status != 200:
                raise HarnessError(f"GET {self.path} -> {resp.status}")
            self.connected.set()
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                with self._cond:
                    self.raw += chunk
                    buf += chunk
                    while b"\n\n" in buf:
                        frame, buf = buf.split(b"\n\n", 1)
                        data = b"\n".join(
                            line[5:].lstrip(b" ")
                            for line in frame.split(b"\n")
                            if line.startswith(b"data:")
                        )
                        if data:
                            try:
                                self.events.append(json.loads(data))
                            except ValueError:
                                self.events.append({"_unparsed": data.decode("utf-8", "replace")})
                    self._cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - recorded for the test
            self.error = e
        finally:
            self.connected.set()
            self.closed.set()
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, pred: Any, timeout: float = 60) -> dict[str, Any]:
        """Wait until an event satisfying ``pred`` arrived; return it."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                while seen < len(self.events):
                    ev = self.events[seen]
                    seen += 1
                    if pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    raise HarnessError(f"SSE {self.path}: event not seen within {timeout}s")
                self._cond.wait(min(left, 0.5))

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                if self._conn.sock is not None:
                    self._conn.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(Exception):
                self._conn.close()
        self._thread.join(timeout=5)


def event_type(ev: dict[str, Any]) -> str | None:
    """``type`` of a /event frame or of a /global/event frame's payload."""
    if "payload" in ev and isinstance(ev["payload"], dict):
        return ev["payload"].get("type")
    return ev.get("type")


@dataclass
class OpenCodeServer:
    env: OpenCodeEnv
    port: int
    host: str = "127.0.0.1"
    proc: subprocess.Popen | None = None
    captures: list[SSECapture] = field(default_factory=list)
    _log: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> None:
        self._log = open(self.env.root / "serve.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.env.command("serve", "--hostname", self.host, "--port", str(self.port)),
            cwd=self.env.work,
            env=self.env.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(
                    f"opencode serve exited with {self.proc.returncode}: "
                    f"{(self.env.root / 'serve.log').read_text()[-2000:]}"
                )
            try:
                status, body = self.request("GET", "/global/health", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise HarnessError(f"opencode serve did not become healthy within {timeout}s")

    def stop(self) -> None:
        for c in self.captures:
            c.close()
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
            _kill_group(self.proc)
        if self._log is not None:
            self._log.close()

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float = 120
    ) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            headers = {"Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw.decode("utf-8", "replace")
            return resp.status, parsed
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, parsed = self.request(method, path, body, **kw)
        if status >= 400:
            raise HarnessError(f"{method} {path} -> {status}: {parsed!r}")
        return parsed

    def sse(self, path: str = "/event") -> SSECapture:
        cap = SSECapture(self.host, self.port, path).start()
        self.captures.append(cap)
        return cap

    # -- conveniences over the HTTP API
    def create_session(self, **body: Any) -> dict[str, Any]:
        return self.json("POST", "/session", body or {})

    def prompt_async(
        self, session_id: str, text: str, *, model: str | None = None, **extra: Any
    ) -> None:
        body = {
            "parts": [{"type": "text", "text": text}],
            "model": {"providerID": PROVIDER_ID, "modelID": model or self.env.model},
            **extra,
        }
        status, parsed = self.request("POST", f"/session/{session_id}/prompt_async", body)
        if status >= 400:
            raise HarnessError(f"prompt_async -> {status}: {parsed!r}")

    def prompt(self, session_id: str, text: str, *, model: str | None = None, **extra: Any) -> Any:
        body = {
            "parts": [{"type": "text", "text": text}],
            "model": {"providerID": PROVIDER_ID, "modelID": model or self.env.model},
            **extra,
        }
        return self.json("POST", f"/session/{session_id}/message", body)
