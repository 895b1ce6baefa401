"""OTLP/HTTP export with the standard library: no SDK, no requests.

``OtlpHttp.send(signal, body)`` posts one ``Export…ServiceRequest`` to the signal's URL
(``/v1/traces``, ``/v1/metrics`` under the base endpoint, as OpenTelemetry's exporters
build it), gzip-compressed by default, over one kept-alive connection. ``body`` is OTLP/JSON
(``otlp``'s); with ``protocol="http/protobuf"`` it goes as protobuf (``protobuf``), and the
server's reply is read as protobuf too, unless its ``Content-Type`` says JSON. 429, 502, 503 and
504 and a connection that fails are retried with exponential backoff (1 s, 2 s, 4 s …, at
most 30 s, with jitter), or after what a ``Retry-After`` header asks (at most 60 s). A 307 or
308 to the same host (``http`` to ``https`` too, never back) is followed with the same body
and headers, a 308's target kept for the signal's later bodies; a redirect anywhere else,
or a 301/302/303 (which would turn the POST into a GET), is not followed: the headers may
carry a key. Any other refusal raises ``ExportError`` naming the URL, the status, where a
redirect pointed and what the server said. A partial success (the server kept some of the
data and rejected the rest) is returned. Over ``https``, a ``Tls`` (the exporter's
``…_CERTIFICATE``, ``…_CLIENT_CERTIFICATE`` and ``…_CLIENT_KEY``) says which CAs to trust
and which certificate to show; a server that is not trusted, or that refuses the TLS
connection, is an ``ExportError`` at once, not retried: waiting does not change a
certificate.

    sender = OtlpHttp(endpoints_from("http://127.0.0.1:4318"), headers={})
    sender.send("traces", body)
"""

from __future__ import annotations

import email.utils
import gzip
import http.client
import json
import random
import re
import ssl
import time
import urllib.parse
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from .._version import __version__
from ..errors import InputError
from ..paths import OtlpEnvironment

__all__ = [
    "ExportError",
    "HTTP_JSON",
    "HTTP_PROTOBUF",
    "OtlpHttp",
    "PartialSuccess",
    "Tls",
    "endpoints_from",
    "RETRYABLE",
    "SIGNAL_PATHS",
]

RETRYABLE = frozenset({429, 502, 503, 504})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SAME_BODY_REDIRECTS = frozenset({307, 308})  # RFC 9110: the method and body kept
_MAX_REDIRECTS = 5
SIGNAL_PATHS = {"traces": "/v1/traces", "metrics": "/v1/metrics"}
HTTP_JSON, HTTP_PROTOBUF = "http/json", "http/protobuf"  # OTEL_EXPORTER_OTLP_PROTOCOL's values
_REJECTED_KEY = {"traces": "rejectedSpans", "metrics": "rejectedDataPoints"}
_BODY_HEADERS = frozenset({"content-type", "content-encoding", "content-length"})
_MAX_BACKOFF = 30.0
_MAX_RETRY_AFTER = 60.0


class ExportError(InputError):
    """The backend refused the data, or could not be reached after the retries.

    ``status``: the HTTP status of a refusal (None: no reply); ``transient``: whether the
    same body may go through later (the backend unreachable, or busy: 429, 502, 503, 504),
    as a follower that keeps what it could not send needs to know.
    """

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False):
        super().__init__(message)
        self.status = status
        self.transient = transient


class PartialSuccess:
    """What a server kept back from one body (``partial_success``)."""

    def __init__(self, signal: str, rejected: int, message: str) -> None:
        self.signal, self.rejected, self.message = signal, rejected, message

    def __str__(self) -> str:
        what = "spans" if self.signal == "traces" else "data points"
        if not self.rejected:  # OTLP: a partial success that rejects none is a warning
            return f"the backend kept all the {what}, and warned: {self.message}"
        text = f"the backend rejected {self.rejected} {what}"
        return f"{text}: {self.message}" if self.message else text


class Tls:
    """A signal's TLS files from the exporter's variables: ``OTEL_EXPORTER_OTLP_CERTIFICATE``
    (the CAs to trust, PEM, in place of the system's) and ``…_CLIENT_CERTIFICATE`` with
    ``…_CLIENT_KEY`` (the certificate and key shown for mutual TLS), each a signal's own
    (``…_TRACES_CERTIFICATE``) over the general one. ``context()`` makes the SSL context
    the first time it is asked, and the same one after; a file that cannot be read or is
    no certificate, or one of the pair without the other, is an ``ExportError`` naming the
    variable."""

    def __init__(self, env: OtlpEnvironment, signal: str) -> None:
        self.ca, self.ca_variable = env.setting(signal, "certificate")
        self.cert, self.cert_variable = env.setting(signal, "client_certificate")
        self.key, self.key_variable = env.setting(signal, "client_key")
        self.files = (self.ca, self.cert, self.key)
        self._context: ssl.SSLContext | None = None

    @classmethod
    def of(cls, env: OtlpEnvironment, signal: str) -> Tls | None:
        """The signal's TLS files, or None when no variable names one."""
        tls = cls(env, signal)
        return tls if any(tls.files) else None

    def context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = self._made()
        return self._context

    def _made(self) -> ssl.SSLContext:
        if bool(self.cert) != bool(self.key):
            given, missing = (
                (self.cert_variable, self.key_variable)
                if self.cert
                else (self.key_variable, self.cert_variable)
            )
            raise ExportError(
                f"{given} is set but {missing} is not: mutual TLS needs the client "
                "certificate and its key"
            )
        for path, variable in ((self.ca, self.ca_variable), (self.cert, self.cert_variable)):
            if path:
                _readable(path, variable)
        if self.key:
            _readable(self.key, self.key_variable)
        try:
            context = ssl.create_default_context(cafile=self.ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ExportError(
                f"{self.ca_variable}: no PEM certificate in {self.ca} ({_tls_text(exc)})"
            ) from None
        if self.cert and self.key:
            try:
                context.load_cert_chain(self.cert, self.key, password=self._no_passphrase)
            except ssl.SSLError as exc:
                raise ExportError(
                    f"{self.cert_variable}, {self.key_variable}: not a PEM certificate and "
                    f"its private key: {self.cert}, {self.key} ({_tls_text(exc)})"
                ) from None
        return context

    def _no_passphrase(self) -> str:
        # Else OpenSSL asks for it on the terminal: a follower would wait there for ever.
        raise ExportError(
            f"{self.key_variable}: {self.key} is encrypted; give the key without a passphrase"
        )


def _readable(path: str, variable: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ExportError(f"{variable}: cannot read {path}: {exc.strerror or exc}") from None


def _tls_text(exc: ssl.SSLError) -> str:
    """An SSL error without OpenSSL's brackets and source line: ``[SSL: X] x (_ssl.c:1)``."""
    text = re.sub(r"^\[[^\]]*\]\s*|\s*\(_ssl\.c:\d+\)$", "", str(exc)).strip()
    return text or str(exc.reason or type(exc).__name__).lower().replace("_", " ")


# Chain errors (X509_V_ERR_…): the issuer unknown, or a self-signed certificate.
_UNKNOWN_ISSUER = frozenset({2, 18, 19, 20, 21})
# Dropped connections, as a network drops them: tried again.
_TLS_TRANSIENT = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _tls_refusal(exc: BaseException, url: str, tls: Tls | None) -> ExportError | None:
    """The error for a server not trusted, or one that refused the TLS connection (an alert:
    no client certificate, an unknown CA…): the same on every try, so not retried."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        said = f"cannot trust {shown_url(url)}: certificate verify failed"
        said += f": {exc.verify_message}" if exc.verify_message else ""
        if exc.verify_code in _UNKNOWN_ISSUER:
            if tls is not None and tls.ca:
                said += f" (not signed by a CA in {tls.ca_variable}, {tls.ca})"
            else:
                said += " (set OTEL_EXPORTER_OTLP_CERTIFICATE to the CA file that signed it)"
        return ExportError(said)
    if not isinstance(exc, ssl.SSLError) or isinstance(exc, _TLS_TRANSIENT):
        return None
    said = f"{shown_url(url)} refused the TLS connection: {_tls_text(exc)}"
    if exc.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED" and (tls is None or not tls.cert):
        said += (
            " (it asks for a client certificate: set OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
            " and OTEL_EXPORTER_OTLP_CLIENT_KEY)"
        )
    return ExportError(said)


def endpoints_from(base: str | None, env: OtlpEnvironment | None = None) -> dict[str, str]:
    """Each signal's URL: ``base`` (``--endpoint``, else ``OTEL_EXPORTER_OTLP_ENDPOINT``)
    with ``/v1/traces`` or ``/v1/metrics`` appended, or the signal's own
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``…_METRICS_ENDPOINT``, used as it is. A
    ``base`` that already ends with a signal's path is taken for the base before it."""
    own_urls = {
        "traces": env.traces_endpoint if env else None,
        "metrics": env.metrics_endpoint if env else None,
    }
    if base:  # ``--endpoint`` given a signal's own URL: its base (it takes both signals)
        stripped = base.strip().rstrip("/")
        for path in SIGNAL_PATHS.values():
            if stripped.endswith(path):
                base = stripped[: -len(path)]
    out: dict[str, str] = {}
    for signal, path in SIGNAL_PATHS.items():
        own = None if base else own_urls[signal]
        root = base or (env.endpoint if env else None)
        if own:
            out[signal] = _checked(own)
        elif root:  # the path appended to the URL's path, before a query it may have
            parts = urllib.parse.urlsplit(_checked(root))
            out[signal] = parts._replace(path=parts.path.rstrip("/") + path).geturl()
    return out


def shown_url(url: str) -> str:
    """``url`` as said to people: without a user and password or a query (either may
    hold a credential)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(a URL that does not parse)"
    host = f"[{host}]" if ":" in host else host
    query = "?…" if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", "")) + query


def _checked(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise ExportError(f"not a URL for OTLP: {shown_url(url)} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExportError(f"not an http(s) URL for OTLP: {shown_url(url)!r}")
    try:  # as http.client sends them: the host by IDNA, the rest ASCII (percent-encoded)
        parts.hostname.encode("idna")
        (parts.path + parts.query).encode("ascii")
    except UnicodeError:
        raise ExportError(
            f"not a URL for OTLP: {shown_url(url)} (not ASCII, or a bad host name)"
        ) from None
    return url.strip()


class OtlpHttp:
    def __init__(
        self,
        endpoints: Mapping[str, str],
        *,
        headers: Mapping[str, str] | None = None,
        compression: str = "gzip",
        timeout: float = 10.0,
        retries: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        tls: Tls | None = None,
        protocol: str = HTTP_JSON,
    ) -> None:
        self.endpoints = dict(endpoints)
        self.protocol = protocol  # HTTP_JSON or HTTP_PROTOBUF: how bodies go
        self.tls = tls  # its context for https connections (else the system's CAs)
        self.headers = dict(headers or {})
        self.compression = compression
        self.timeout = timeout
        self.retries = retries
        self.sleep = sleep
        self._connections: dict[tuple[str, str, int], http.client.HTTPConnection] = {}
        self.requests = 0  # bodies accepted
        self.bytes_sent = 0

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> OtlpHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encoded(self, signal: str, body: bytes) -> bytes:
        """``body`` (OTLP/JSON) as it goes on the wire: protobuf with ``http/protobuf``.
        Given to ``send(…, encoded=True)``, it is not encoded again (workers encode so)."""
        if self.protocol != HTTP_PROTOBUF:
            return body
        from .protobuf import encoded

        return encoded(signal, body)

    def send(self, signal: str, body: bytes, *, encoded: bool = False) -> PartialSuccess | None:
        """Post ``body`` (OTLP/JSON, or already ``encoded()``); the backend's partial
        success, if it tells one."""
        if not encoded:
            body = self.encoded(signal, body)
        protobuf = self.protocol == HTTP_PROTOBUF
        url = self.endpoints[signal]
        parts = urllib.parse.urlsplit(url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        # One of each name, whatever its case (a second Authorization is a request a proxy
        # may refuse); what the body is stays ours to say.
        named = {"user-agent": ("User-Agent", f"opencode-events/{__version__}")}
        for name, value in self.headers.items():
            if name.lower() not in _BODY_HEADERS:
                named[name.lower()] = (name, value)
        headers = dict(named.values())
        headers["Content-Type"] = "application/x-protobuf" if protobuf else "application/json"
        if self.compression == "gzip":
            body = gzip.compress(body, compresslevel=6, mtime=0)
            headers["Content-Encoding"] = "gzip"
        attempt = redirects = 0
        while True:
            try:
                status, reason, reply_headers, reply = self._post(parts, target, body, headers)
            except (OSError, http.client.HTTPException) as exc:
                refused = _tls_refusal(exc, url, self.tls)
                if refused is not None:
                    raise refused from None
                if attempt >= self.retries:
                    why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                    raise ExportError(
                        f"cannot reach {shown_url(url)}: {why} ({_attempts(attempt)})",
                        transient=True,
                    ) from None
                self.sleep(_backoff(attempt))
                attempt += 1
                continue
            if 200 <= status < 300:
                self.requests += 1
                self.bytes_sent += len(body)
                return _partial_success(signal, reply, _protobuf_reply(reply_headers, protobuf))
            if status in RETRYABLE and attempt < self.retries:
                wait = _retry_after(reply_headers.get("retry-after"))
                self.sleep(_backoff(attempt) if wait is None else wait)
                attempt += 1
                continue
            moved = _redirect_target(url, status, reply_headers.get("location"))
            if moved and redirects < _MAX_REDIRECTS and _may_follow(url, moved, status):
                redirects += 1
                if status == 308:  # permanent: the signal's later bodies go there at once
                    self.endpoints[signal] = moved
                url, parts = moved, urllib.parse.urlsplit(moved)
                target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                continue
            tried = f" ({_attempts(attempt)})" if attempt else ""
            if moved:
                said = _why_not_followed(url, moved, status)
            else:
                said = _what_it_said(reply, _protobuf_reply(reply_headers, protobuf))
                if status == 415:  # Unsupported Media Type: the other encoding may do
                    other = HTTP_JSON if protobuf else HTTP_PROTOBUF
                    said += f"{'; ' if said else ''}it may take {other}: set "
                    said += f"OTEL_EXPORTER_OTLP_PROTOCOL={other}"
            raise ExportError(
                f"{shown_url(url)} refused the {signal}: HTTP {status} {reason}{tried}"
                + (f": {said}" if said else ""),
                status=status,
                transient=status in RETRYABLE,
            )

    def _post(
        self, parts: urllib.parse.SplitResult, target: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, str, dict[str, str], bytes]:
        key = (parts.scheme, parts.hostname or "", parts.port or 0)
        connection = self._connections.get(key)
        if connection is None:
            if parts.scheme == "https":
                connection = http.client.HTTPSConnection(
                    parts.hostname or "",
                    parts.port,
                    timeout=self.timeout,
                    context=self.tls.context() if self.tls else None,
                )
            else:
                connection = http.client.HTTPConnection(
                    parts.hostname or "", parts.port, timeout=self.timeout
                )
            self._connections[key] = connection
        try:
            connection.request("POST", target, body=body, headers=headers)
            response = connection.getresponse()
            reply = response.read(1 << 20)  # a reply is small; never read an endless one
            reply_headers = {k.lower(): v for k, v in response.getheaders()}
            if response.will_close or len(reply) >= 1 << 20:
                connection.close()
                del self._connections[key]
            return response.status, response.reason, reply_headers, reply
        except ssl.SSLEOFError as exc:
            alert = _alert_behind(connection)
            connection.close()
            self._connections.pop(key, None)
            if alert is not None:
                raise alert from exc
            raise
        except BaseException:
            connection.close()
            self._connections.pop(key, None)
            raise


def _alert_behind(connection: http.client.HTTPConnection) -> ssl.SSLError | None:
    """The TLS alert a server sent before it closed, when the request's writing met the
    close first: a TLS 1.3 server that wants a client certificate says so only after the
    client's handshake is done, and the request may race it. None when there is none."""
    sock = connection.sock
    if not isinstance(sock, ssl.SSLSocket):
        return None
    try:
        sock.settimeout(1.0)
        sock.recv(1)
    except ssl.SSLError as exc:
        return None if isinstance(exc, _TLS_TRANSIENT) else exc
    except OSError:
        pass
    return None


_NOT_IN_A_URL = re.compile(r"[^\x21-\x7e]")


def _percent_encoded(found: re.Match[str]) -> str:
    char = found.group()
    raw = char.encode("latin-1") if char <= "\xff" else char.encode("utf-8", "replace")
    return "".join(f"%{byte:02X}" for byte in raw)


def _redirect_target(url: str, status: int, location: str | None) -> str | None:
    """Where a redirect points, as an absolute URL (``Location`` may be relative), or None."""
    if status not in _REDIRECTS or not location or not location.strip():
        return None
    # http.client reads a header as Latin-1 and sends a path as ASCII: a Location's bytes
    # past ASCII (a UTF-8 path), and spaces, go percent-encoded, as curl sends them.
    location = _NOT_IN_A_URL.sub(_percent_encoded, location.strip())
    try:
        moved = urllib.parse.urljoin(url, location)
        urllib.parse.urlsplit(moved).port  # noqa: B018 - raises ValueError when out of range
    except ValueError:
        return None
    return moved


def _may_follow(url: str, moved: str, status: int) -> bool:
    """A 307/308 to the same host, and never from ``https`` to ``http``: the request's
    headers (a key, a token) go with it, so nowhere the user did not name."""
    before, after = urllib.parse.urlsplit(url), urllib.parse.urlsplit(moved)
    return (
        status in _SAME_BODY_REDIRECTS
        and after.scheme in ("http", "https")
        and not (before.scheme == "https" and after.scheme == "http")
        and (after.hostname or "") == (before.hostname or "")
    )


def _why_not_followed(url: str, moved: str, status: int) -> str:
    shown = shown_url(moved)
    if status not in _SAME_BODY_REDIRECTS:
        return f"moved to {shown}, which would be a GET without the data; use that URL"
    if _may_follow(url, moved, status):
        return f"redirected more than {_MAX_REDIRECTS} times, the last to {shown}"
    return (
        f"redirected to {shown}, not followed (the headers go only where you named); use that URL"
    )


def _attempts(attempt: int) -> str:
    return "after 1 attempt" if attempt == 0 else f"after {attempt + 1} attempts"


def _backoff(attempt: int) -> float:
    """1 s, 2 s, 4 s … at most 30 s, each shortened by up to a fifth at random, so that many
    exporters told to wait do not all come back at once."""
    return min(_MAX_BACKOFF, 2.0**attempt) * (1 - random.random() / 5)


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds to wait: a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, min(_MAX_RETRY_AFTER, seconds))


def _protobuf_reply(headers: Mapping[str, str], sent_protobuf: bool) -> bool:
    """Whether a reply is protobuf: as its ``Content-Type`` says, else as the request went
    (OTLP: the server answers in the request's encoding)."""
    kind = headers.get("content-type", "").lower()
    if "protobuf" in kind:
        return True
    return sent_protobuf and "json" not in kind


_MAX_UNZIPPED = 4 << 20  # a reply's body unzipped: its status, a partial success, a message


def _unzipped(reply: bytes) -> bytes | None:
    """A reply's body, gunzipped when it is gzip; at most ``_MAX_UNZIPPED`` bytes of it (a
    megabyte read may unzip to a gigabyte: a damaged or hostile backend's), None when the
    gzip is damaged or cut short. As ``gzip.decompress``: every member, one after another,
    and the zeros that may pad them."""
    if reply[:2] != b"\x1f\x8b":
        return reply
    members: list[bytes] = []
    size, rest = 0, reply
    while rest:
        unzip = zlib.decompressobj(wbits=31)  # gzip's header and trailer
        try:
            member = unzip.decompress(rest, _MAX_UNZIPPED - size)
        except zlib.error:
            return None
        members.append(member)
        size += len(member)
        if size >= _MAX_UNZIPPED:  # as far as a reply is read: the rest is not looked at
            break
        if not unzip.eof:  # cut short: no end of the member, no check of its bytes
            return None
        rest = unzip.unused_data.lstrip(b"\x00")
    return b"".join(members)


def _decoded(reply: bytes) -> Any:
    unzipped = _unzipped(reply)
    if unzipped is None:
        return None
    try:
        return json.loads(unzipped)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _partial_success(signal: str, reply: bytes, protobuf: bool = False) -> PartialSuccess | None:
    if protobuf:  # an Export…ServiceResponse
        from .protobuf import partial_success

        unzipped = _unzipped(reply) if reply else None
        found = partial_success(unzipped) if unzipped else None
        if found is None or found == (0, ""):
            return None
        return PartialSuccess(signal, found[0], found[1])
    document = _decoded(reply) if reply else None
    if not isinstance(document, dict):
        return None
    partial = document.get("partialSuccess") or document.get("partial_success")
    if not isinstance(partial, dict):
        return None
    rejected = partial.get(_REJECTED_KEY[signal], 0)
    try:
        count = int(rejected)
    except (TypeError, ValueError):
        count = 0
    message = partial.get("errorMessage") or partial.get("error_message") or ""
    if not count and not message:
        return None
    return PartialSuccess(signal, count, str(message))


def _what_it_said(reply: bytes, protobuf: bool = False) -> str:
    """A refusal's reason: an OTLP ``Status`` message (a protobuf ``google.rpc.Status``'s
    when the reply is protobuf), else the start of the body's text."""
    if protobuf:
        from .protobuf import status_message

        unzipped = _unzipped(reply)
        said = status_message(unzipped) if unzipped else None
        message = " ".join((said or "").split())
        if message and message.isprintable():
            return message[:300]
    document = _decoded(reply)
    if isinstance(document, dict):
        message = document.get("message") or document.get("detail") or document.get("error")
        if isinstance(message, dict):
            message = message.get("message")
        if isinstance(message, str) and message:
            return " ".join(message.split())[:300]
    text = reply[:2000].decode("utf-8", "replace")
    if "\x00" in text or "\ufffd" in text:  # a protobuf Status, not text: nothing to quote
        return ""
    return " ".join(text.split())[:300]
