"""A scripted OpenAI-compatible chat-completions server for driving OpenCode.

Standard library only.  Bound to 127.0.0.1 on a free port.

Routes
------
``GET  /v1/models``                 a model list (ids from the scenario, plus defaults)
``POST /v1/chat/completions``       streaming (SSE) or plain JSON answers, from a script
``GET  /pages/<name>``              small static pages for the ``webfetch`` tool
anything else                       404

Scripts
-------
A *script* is a list of steps.  Every chat-completion request that is not a
title-generation request is routed to one *conversation* and consumes that
conversation's next step.  Conversations are chosen by matching a marker
against the request (see :meth:`MockModel.classify`):

* ``"title"``   -- OpenCode's title-generation request.  Answered with
  ``title`` (a short fixed text) and never consumes a step.
* a named conversation from ``conversations`` whose ``match`` string occurs in
  the *first* user message of the request (subagents: put a marker such as
  ``[child-1]`` in the ``task`` prompt) or whose ``match_system`` string occurs
  in the system prompt (e.g. the compaction agent's prompt).
  or whose ``match_last`` string occurs in the *last* user message.
* ``"main"``    -- everything else.

Strings ``{MOCK_URL}`` (and keys of ``substitutions``) in a step are replaced
when the step is served, so a step can point ``webfetch`` at this server.

A step is a dict (all keys optional)::

    {
      "reasoning": ["thinking ", "hard"],   # reasoning_content deltas
      "text": ["Hello ", "world"],          # content deltas
      "tool_calls": [                       # function calls, in order
          {"name": "bash", "arguments": {"command": "echo hi"}, "id": "call_1"},
          # "arguments" may also be a raw string (sent verbatim)
      ],
      "finish_reason": "stop",              # default: tool_calls if any tool call, else stop
      "usage": {"prompt_tokens": 100, "completion_tokens": 20,
                "cached_tokens": 5, "reasoning_tokens": 3},
               # or MEASURED ("measured"): figures measured from the request, below
      "delay": 0.0,                         # seconds to sleep between chunks
      "error": {"status": 400, "body": {...}},   # answer with an HTTP error instead
    }

Measured usage
--------------
``"usage": MEASURED`` makes a step report figures measured from the request it
answers, roughly as a real provider would (4 bytes a token), instead of
scripted ones:

* ``prompt_tokens``: ceil(bytes / 4) of the request's ``messages`` plus its
  ``tools`` (each as compact JSON, ``separators=(",", ":")``, UTF-8; no
  ``tools`` counts 0);
* ``cached_tokens``: the prompt measured the same way for the previous request
  of the same conversation, when that is not larger than this prompt (else 0);
* ``completion_tokens``: ceil(bytes / 4) of what the step generates -- its text,
  reasoning and tool-call arguments (as sent) -- at least 1;
* ``reasoning_tokens``: ceil(bytes / 4) of its reasoning (0 without).

The figures served are logged with the request (``LoggedRequest.usage``, and a
``usage`` key in ``requests.jsonl``; scripted steps log none).

When a conversation runs out of steps the server answers with a plain text
``"(mock: no scripted step left)"`` and records that in ``unscripted``.

Every request is logged (``requests``) with its classification, so tests can
assert what OpenCode sent (tools offered, messages, model ...).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["MEASURED", "MockModel", "Step", "default_usage", "measured_usage", "summarize_request"]

Step = dict[str, Any]

TITLE_TEXT = "Mock session title"

# A step's ``usage`` that asks for figures measured from the request (see the module doc).
# A string, so that it survives the JSON round trip of ``{MOCK_URL}`` substitution.
MEASURED = "measured"
BYTES_PER_TOKEN = 4

# Substrings that identify OpenCode's title-generation request (system prompt of
# the hidden "title" agent in 1.18.33).  Checked case-insensitively.
TITLE_MARKERS = ("title generator", "generate a title", "you are a title")


def default_usage(n: int) -> dict[str, int]:
    """Distinct, recognisable token numbers for the n-th (1-based) step."""
    return {
        "prompt_tokens": 1000 * n + 111,
        "completion_tokens": 10 * n + 7,
        "cached_tokens": 100 * n + 3,
        "reasoning_tokens": n + 1 if n % 2 else 0,
    }


def _tokens(n_bytes: int) -> int:
    return -(-n_bytes // BYTES_PER_TOKEN)


def _compact_bytes(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def request_prompt_tokens(body: dict[str, Any]) -> int:
    """ceil(bytes / 4) of a request's ``messages`` and ``tools`` as compact JSON."""
    size = _compact_bytes(body.get("messages") or [])
    if body.get("tools"):
        size += _compact_bytes(body["tools"])
    return _tokens(size)


def _arguments(call: dict[str, Any]) -> str:
    """A tool call's arguments as the server sends them."""
    args = call.get("arguments", {})
    return args if isinstance(args, str) else json.dumps(args)


def _joined(deltas: Any) -> str:
    return deltas if isinstance(deltas, str) else "".join(deltas or [])


def measured_usage(step: Step, prompt_tokens: int, previous_prompt: int | None) -> dict[str, int]:
    """The usage a MEASURED step reports (see the module doc)."""
    reasoning = len(_joined(step.get("reasoning")).encode())
    generated = len(_joined(step.get("text")).encode()) + reasoning
    generated += sum(len(_arguments(c).encode()) for c in step.get("tool_calls") or [])
    cached = previous_prompt if previous_prompt and previous_prompt <= prompt_tokens else 0
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": max(1, _tokens(generated)),
        "cached_tokens": cached,
        "reasoning_tokens": _tokens(reasoning),
    }


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for item in content:
            if isinstance(item, dict):
                if isinstance(item.get("text"), str):
                    out.append(item["text"])
            elif isinstance(item, str):
                out.append(item)
        return "\n".join(out)
    return str(content)


def summarize_request(body: dict[str, Any]) -> dict[str, Any]:
    """A compact description of a chat-completions request body."""
    msgs = body.get("messages") or []
    system = "\n".join(_text_of(m.get("content")) for m in msgs if m.get("role") == "system")
    users = [_text_of(m.get("content")) for m in msgs if m.get("role") == "user"]
    tools = sorted((t.get("function") or {}).get("name", "?") for t in (body.get("tools") or []))
    return {
        "model": body.get("model"),
        "stream": bool(body.get("stream")),
        "tools": tools,
        "n_messages": len(msgs),
        "roles": [m.get("role") for m in msgs],
        "system_head": system[:200],
        "first_user": users[0][:300] if users else None,
        "last_user": users[-1][:300] if users else None,
        "last_role": msgs[-1].get("role") if msgs else None,
        "tool_results": [
            {"tool_call_id": m.get("tool_call_id"), "content": _text_of(m.get("content"))[:300]}
            for m in msgs
            if m.get("role") == "tool"
        ][-3:],
    }


@dataclass
class Conversation:
    name: str
    steps: list[Step]
    match: str | None = None
    match_system: str | None = None
    match_last: str | None = None
    cursor: int = 0
    last_prompt: int | None = None  # measured prompt of its previous request


@dataclass
class LoggedRequest:
    index: int
    time: float
    method: str
    path: str
    conversation: str | None
    step: int | None
    summary: dict[str, Any] | None
    body: dict[str, Any] | None = field(default=None, repr=False)
    usage: dict[str, int] | None = None  # the figures a MEASURED step reported

    def to_json(self, full: bool = False) -> dict[str, Any]:
        d = {
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "conversation": self.conversation,
            "step": self.step,
        }
        if self.summary is not None:
            d["summary"] = self.summary
        if self.usage is not None:
            d["usage"] = self.usage
        if full and self.body is not None:
            d["body"] = self.body
        return d


class MockModel:
    """The scripted model server.  Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        steps: list[Step] | None = None,
        *,
        conversations: dict[str, dict[str, Any]] | None = None,
        pages: dict[str, tuple[str, str]] | None = None,
        models: list[str] | None = None,
        title: str = TITLE_TEXT,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.lock = threading.Lock()
        self.conversations: dict[str, Conversation] = {
            "main": Conversation("main", [copy.deepcopy(s) for s in (steps or [])])
        }
        for name, conv in (conversations or {}).items():
            self.conversations[name] = Conversation(
                name,
                [copy.deepcopy(s) for s in conv.get("steps", [])],
                match=conv.get("match"),
                match_system=conv.get("match_system"),
                match_last=conv.get("match_last"),
            )
        self.pages = dict(pages or {})
        self.models = list(models or ["mock-model", "gpt-5-mock"])
        self.title = title
        self.requests: list[LoggedRequest] = []
        self.substitutions: dict[str, str] = {}
        self.unscripted: list[int] = []
        self._host = host
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._step_counter = 0  # global count of scripted steps served (for default usage)

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> MockModel:
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer((self._host, self._port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="mock-model", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> MockModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # -- scripting -------------------------------------------------------------------
    def add_steps(self, steps: list[Step], conversation: str = "main") -> None:
        with self.lock:
            self.conversations[conversation].steps.extend(copy.deepcopy(s) for s in steps)

    def remaining(self, conversation: str = "main") -> int:
        with self.lock:
            c = self.conversations[conversation]
            return len(c.steps) - c.cursor

    def chat_requests(self, conversation: str | None = None) -> list[LoggedRequest]:
        return [
            r
            for r in self.requests
            if r.path.endswith("/chat/completions")
            and (conversation is None or r.conversation == conversation)
        ]

    def classify(self, body: dict[str, Any]) -> str:
        msgs = body.get("messages") or []
        system = "\n".join(_text_of(m.get("content")) for m in msgs if m.get("role") == "system")
        users = [_text_of(m.get("content")) for m in msgs if m.get("role") == "user"]
        low = system.lower()
        if any(marker in low for marker in TITLE_MARKERS):
            return "title"
        first_user = users[0] if users else ""
        last_user = users[-1] if users else ""
        for conv in self.conversations.values():
            if conv.match_system and conv.match_system in system:
                return conv.name
            if conv.match_last and conv.match_last in last_user:
                return conv.name
        for conv in self.conversations.values():
            if conv.match and conv.match in first_user:
                return conv.name
        return "main"

    def _next_step(
        self, conv_name: str, body: dict[str, Any] | None = None
    ) -> tuple[int | None, Step | None]:
        with self.lock:
            conv = self.conversations[conv_name]
            prompt = request_prompt_tokens(body or {})
            previous, conv.last_prompt = conv.last_prompt, prompt
            if conv.cursor >= len(conv.steps):
                return None, None
            idx = conv.cursor
            conv.cursor += 1
            self._step_counter += 1
            step = self._substitute(conv.steps[idx])
            if "usage" not in step:
                step["usage"] = default_usage(self._step_counter)
            elif step["usage"] == MEASURED:
                step["usage"] = measured_usage(step, prompt, previous)
                step["_measured"] = step["usage"]  # logged with the request, then dropped
            return idx, step

    def _substitute(self, step: Step) -> Step:
        """Deep copy of ``step`` with ``{MOCK_URL}`` (and ``substitutions``) filled in."""
        text = json.dumps(step)
        subs = {"{MOCK_URL}": self.url, **self.substitutions}
        for k, v in subs.items():
            text = text.replace(k, json.dumps(v)[1:-1])
        return json.loads(text)

    def _log(self, **kw: Any) -> LoggedRequest:
        with self.lock:
            entry = LoggedRequest(index=len(self.requests), time=time.time(), **kw)
            self.requests.append(entry)
            return entry

    def requests_jsonl(self, full: bool = False) -> str:
        return "".join(json.dumps(r.to_json(full), sort_keys=True) + "\n" for r in self.requests)


# ----------------------------------------------------------------------------------------
# HTTP handling


def _usage_payload(u: dict[str, Any]) -> dict[str, Any]:
    prompt = int(u.get("prompt_tokens", 0))
    completion = int(u.get("completion_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": int(u.get("cached_tokens", 0))},
        "completion_tokens_details": {"reasoning_tokens": int(u.get("reasoning_tokens", 0))},
    }


def _chunks_for_step(step: Step, model: str, cid: str) -> list[dict[str, Any]]:
    created = 1_700_000_000
    base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    for r in step.get("reasoning") or []:
        out.append(chunk({"reasoning_content": r}))
    text = step.get("text") or []
    if isinstance(text, str):
        text = [text]
    for t in text:
        out.append(chunk({"content": t}))
    calls = step.get("tool_calls") or []
    for i, call in enumerate(calls):
        args_s = _arguments(call)
        call_id = call.get("id") or f"call_{cid[-6:]}_{i}"
        # name first, then the arguments in two pieces (exercises partial JSON)
        half = len(args_s) // 2
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call["name"], "arguments": args_s[:half]},
                        }
                    ]
                }
            )
        )
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": args_s[half:]}}]}))
    finish = step.get("finish_reason") or ("tool_calls" if calls else "stop")
    out.append(chunk({}, finish))
    out.append({**base, "choices": [], "usage": _usage_payload(step.get("usage") or {})})
    return out


def _completion_for_step(step: Step, model: str, cid: str) -> dict[str, Any]:
    text = step.get("text") or []
    if isinstance(text, str):
        text = [text]
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if step.get("reasoning"):
        msg["reasoning_content"] = "".join(step["reasoning"])
    calls = step.get("tool_calls") or []
    if calls:
        msg["tool_calls"] = [
            {
                "id": c.get("id") or f"call_{cid[-6:]}_{i}",
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"]
                    if isinstance(c.get("arguments"), str)
                    else json.dumps(c.get("arguments", {})),
                },
            }
            for i, c in enumerate(calls)
        ]
    finish = step.get("finish_reason") or ("tool_calls" if calls else "stop")
    return {
        "id": cid,
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": _usage_payload(step.get("usage") or {}),
    }


def _make_handler(mock: MockModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "mock-model/1"
        sys_version = ""  # keep the Server header stable (no Python version)

        def log_message(self, format: str, *args: Any) -> None:  # silence stderr
            pass

        # -- helpers
        def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        # -- routes
        def do_GET(self) -> None:  # noqa: N802
            mock._log(method="GET", path=self.path, conversation=None, step=None, summary=None)
            path = self.path.split("?", 1)[0]
            if path.rstrip("/") in ("/v1/models", "/models"):
                self._send_json(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": m, "object": "model", "created": 0, "owned_by": "mock"}
                            for m in mock.models
                        ],
                    },
                )
                return
            if path.startswith("/pages/"):
                name = path[len("/pages/") :]
                if name in mock.pages:
                    ctype, body = mock.pages[name]
                    data = body.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
            self._send_json(404, {"error": {"message": f"no route {path}"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            path = self.path.split("?", 1)[0]
            if not path.endswith("/chat/completions"):
                mock._log(
                    method="POST",
                    path=self.path,
                    conversation=None,
                    step=None,
                    summary=None,
                    body=body,
                )
                self._send_json(404, {"error": {"message": f"no route {path}"}})
                return
            conv = mock.classify(body)
            model = body.get("model") or "mock-model"
            if conv == "title":
                mock._log(
                    method="POST",
                    path=self.path,
                    conversation="title",
                    step=None,
                    summary=summarize_request(body),
                    body=body,
                )
                step: Step = {
                    "text": [mock.title],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 3},
                }
                idx = None
            else:
                idx, step = mock._next_step(conv, body)
                mock._log(
                    method="POST",
                    path=self.path,
                    conversation=conv,
                    step=idx,
                    summary=summarize_request(body),
                    body=body,
                    usage=step.pop("_measured") if step and "_measured" in step else None,
                )
                if step is None:
                    with mock.lock:
                        mock.unscripted.append(len(mock.requests) - 1)
                    step = {
                        "text": ["(mock: no scripted step left)"],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                    }
            err = step.get("error")
            if err:
                status = int(err.get("status", 400))
                ebody = err.get("body") or {
                    "error": {
                        "message": f"mock error {status}",
                        "type": "mock_error",
                        "code": status,
                    }
                }
                self._send_json(status, ebody, err.get("headers"))
                return
            cid = f"chatcmpl-mock{len(mock.requests):04d}"
            if not body.get("stream"):
                self._send_json(200, _completion_for_step(step, model, cid))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            delay = float(step.get("delay") or 0)
            try:
                for c in _chunks_for_step(step, model, cid):
                    self._write_chunk(b"data: " + json.dumps(c).encode() + b"\n\n")
                    if delay:
                        time.sleep(delay)
                self._write_chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler
