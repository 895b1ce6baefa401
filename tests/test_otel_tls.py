"""`otel` over TLS: the OTLP exporter's certificate variables (docs/otel.md, Environment).

``OTEL_EXPORTER_OTLP_CERTIFICATE`` (the CAs to trust), ``…_CLIENT_CERTIFICATE`` and
``…_CLIENT_KEY`` (mutual TLS), each a signal's own over the general one, against a real TLS
server on 127.0.0.1 whose certificates the ``openssl`` command makes for each test module:
a collector behind an internal CA, as a platform team runs one.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from opencode_events.otel import transport as otel_transport
from opencode_events.otel.export import HttpDestination
from opencode_events.otel.transport import ExportError, OtlpHttp, Tls, endpoints_from
from opencode_events.paths import otlp_environment
from tests.test_otel import SAMPLES, backend, run

DB = str(SAMPLES / "text" / "opencode.db")


class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate it signed; another
    CA that signed nothing here."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.ca, self.ca_key = self._ca("ca")
        self.other_ca, _ = self._ca("other-ca")
        self.server, self.server_key = self._leaf("server", "subjectAltName=IP:127.0.0.1")
        self.client, self.client_key = self._leaf("client", "extendedKeyUsage=clientAuth")

    def _openssl(self, *args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    def _ca(self, name: str) -> tuple[Path, Path]:
        pem, key = self.where / f"{name}.pem", self.where / f"{name}.key"
        self._openssl(
            *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"),
            *("-keyout", key, "-out", pem, "-days", "2", "-subj", f"/CN={name}"),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        )
        return pem, key

    def _leaf(self, name: str, extension: str) -> tuple[Path, Path]:
        pem, key, csr = (self.where / f"{name}.{ext}" for ext in ("pem", "key", "csr"))
        extensions = self.where / f"{name}.ext"
        extensions.write_text(extension + "\n")
        self._openssl(
            *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"),
            *("-keyout", key, "-out", csr, "-subj", f"/CN={name}"),
        )
        self._openssl(
            *("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key),
            *("-CAcreateserial", "-out", pem, "-days", "2", "-extfile", extensions),
        )
        return pem, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make the test certificates")
    return Pki(tmp_path_factory.mktemp("pki"))


class Seen:
    def __init__(self) -> None:
        self.handshakes = 0  # connections that tried TLS, whether it succeeded or not
        self.paths: list[str] = []


@contextmanager
def tls_backend(pki: Pki, *, client_ca: Path | None = None) -> Iterator[tuple[Seen, str]]:
    """An OTLP/HTTP server over TLS on 127.0.0.1 answering 200 to every POST; with
    ``client_ca``, mutual TLS: a client certificate signed by it is required. Stopped, its
    threads joined, when the block ends."""
    seen = Seen()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server, pki.server_key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.paths.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = False  # server_close joins every connection's thread
        block_on_close = True

        def finish_request(self, request, client_address) -> None:
            # The handshake in the connection's thread; a failed one sends its alert, and
            # what the client sent is read before the socket closes, so that the client
            # reads the alert rather than a reset (a collector's close may race it).
            seen.handshakes += 1
            request.settimeout(10)
            wrapped = context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
            try:
                wrapped.do_handshake()
            except (ssl.SSLError, OSError):
                raw = socket.socket(fileno=wrapped.detach())
                try:
                    raw.shutdown(socket.SHUT_WR)
                    while raw.recv(65536):
                        pass
                except OSError:
                    pass
                finally:
                    raw.close()
                return
            super().finish_request(wrapped, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield seen, f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def otel(url: str, env: dict[str, str], *args: str):
    """``otel --all`` of a small store to ``url`` (the environment's endpoint), one retry."""
    return run(
        ["otel", "--db", DB, "--all", "--retries", "1", *args],
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": url, **env},
    )


def error_line(result) -> str:
    """The one line a failed run says (no traceback), after checking it failed with 2."""
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("error: "), line
    return line


def test_a_collector_signed_by_the_ca_in_the_certificate_variable_is_trusted(pki):
    with tls_backend(pki) as (seen, url):
        result = otel(url, {"OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca)})
    assert result.returncode == 0, result.stderr
    assert seen.paths == ["/v1/traces", "/v1/metrics"]
    assert f"in 2 requests to {url}".encode() in result.stderr


@pytest.mark.parametrize("ca", [None, "other_ca"])
def test_a_collector_not_trusted_is_one_error_line_at_once(pki, ca):
    """Without the CA (the system's do not sign an internal collector), or with a CA that
    did not sign it: ``certificate verify failed``, once, exit 2; not the retries of a
    backend out of reach (a certificate does not change by waiting)."""
    env = {"OTEL_EXPORTER_OTLP_CERTIFICATE": str(getattr(pki, ca))} if ca else {}
    with tls_backend(pki) as (seen, url):
        line = error_line(otel(url, env))
    assert seen.handshakes == 1 and seen.paths == []
    # the server shows its certificate alone: its issuer is not known
    assert line.startswith(
        f"error: cannot trust {url}/v1/traces: certificate verify failed: "
        "unable to get local issuer certificate ("
    ), line
    if ca:
        assert line.endswith(
            f"(not signed by a CA in OTEL_EXPORTER_OTLP_CERTIFICATE, {pki.other_ca})"
        )
    else:
        assert line.endswith("(set OTEL_EXPORTER_OTLP_CERTIFICATE to the CA file that signed it)")


def test_mutual_tls_shows_the_client_certificate_and_key(pki):
    env = {
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca),
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(pki.client),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(pki.client_key),
    }
    with tls_backend(pki, client_ca=pki.ca) as (seen, url):
        result = otel(url, env)
    assert result.returncode == 0, result.stderr
    assert seen.paths == ["/v1/traces", "/v1/metrics"]


def test_mutual_tls_without_a_client_certificate_is_one_error_line(pki):
    with tls_backend(pki, client_ca=pki.ca) as (seen, url):
        line = error_line(otel(url, {"OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca)}))
    assert seen.paths == [] and seen.handshakes == 1
    assert line == (
        f"error: {url}/v1/traces refused the TLS connection: tlsv13 alert certificate "
        "required (it asks for a client certificate: set OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE "
        "and OTEL_EXPORTER_OTLP_CLIENT_KEY)"
    )


def test_a_signals_own_certificate_is_over_the_general_one(pki):
    """``…_TRACES_CERTIFICATE`` for the traces alone: they go; the metrics, with the
    general (wrong) CA, are refused naming the general variable."""
    env = {
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.other_ca),
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": str(pki.ca),
    }
    with tls_backend(pki) as (seen, url):
        line = error_line(otel(url, env))
    assert seen.paths == ["/v1/traces"]
    assert line.startswith(f"error: cannot trust {url}/v1/metrics: certificate verify failed")
    assert line.endswith(f"(not signed by a CA in OTEL_EXPORTER_OTLP_CERTIFICATE, {pki.other_ca})")


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            {"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "client"},
            "error: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is set but "
            "OTEL_EXPORTER_OTLP_CLIENT_KEY is not: mutual TLS needs the client certificate "
            "and its key",
        ),
        (
            {"OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY": "client_key"},
            "error: OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY is set but "
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is not: mutual TLS needs the client "
            "certificate and its key",
        ),
        (
            {"OTEL_EXPORTER_OTLP_CERTIFICATE": "{tmp}/no/ca.pem"},
            "error: OTEL_EXPORTER_OTLP_CERTIFICATE: cannot read {tmp}/no/ca.pem: "
            "No such file or directory",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "{tmp}/not.pem"},
            "error: OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: no PEM certificate in {tmp}/not.pem "
            "(no certificate or crl found)",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "client",
                "OTEL_EXPORTER_OTLP_CLIENT_KEY": "server_key",
            },
            "error: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_KEY: not "
            "a PEM certificate and its private key: {client}, {server_key} (key values "
            "mismatch)",
        ),
    ],
)
def test_a_bad_tls_setting_is_one_error_line_before_anything_is_sent(pki, tmp_path, given, said):
    (tmp_path / "not.pem").write_text("not a certificate\n")
    names = {"client": pki.client, "client_key": pki.client_key, "server_key": pki.server_key}
    env = {name: str(names.get(value, value)).format(tmp=tmp_path) for name, value in given.items()}
    with tls_backend(pki) as (seen, url):
        line = error_line(otel(url, env))
    assert seen.handshakes == 0
    assert line == said.format(tmp=tmp_path, **names)


def test_over_http_the_files_are_not_read_but_a_redirect_to_https_uses_them(pki):
    """The spec's variables are for secure connections: over ``http`` a bad one stops
    nothing; a collector that moves ``http`` to ``https`` (a 307) is trusted with them."""
    missing = otlp_environment({"OTEL_EXPORTER_OTLP_CERTIFICATE": "/no/such/ca.pem"})
    HttpDestination("http://127.0.0.1:9", env=missing).close()
    with tls_backend(pki) as (seen, secure):
        moved = {"Location": f"{secure}/v1/traces"}
        with backend([307], headers=moved) as (_, plain):
            result = otel(
                plain, {"OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca)}, "--only", "traces"
            )
    assert result.returncode == 0, result.stderr
    assert seen.paths == ["/v1/traces"]


def test_the_ssl_context_is_made_once_for_the_destination(pki, monkeypatch):
    made: list[object] = []
    create = ssl.create_default_context

    def counted(*args, **kw):
        if "cafile" in kw:  # ours; not the test server's own
            made.append(kw["cafile"])
        return create(*args, **kw)

    monkeypatch.setattr(otel_transport.ssl, "create_default_context", counted)
    env = otlp_environment({"OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca)})
    with tls_backend(pki) as (seen, url):
        destination = HttpDestination(url, env=env)
        try:
            for signal in ("traces", "metrics", "traces"):
                destination.hurry()  # each body on a new connection
                destination.send(signal, b"{}")
        finally:
            destination.close()
    assert seen.paths == ["/v1/traces", "/v1/metrics", "/v1/traces"]
    assert made == [str(pki.ca)]


def test_an_encrypted_key_is_an_error_not_a_prompt(pki, tmp_path):
    """OpenSSL would ask for the passphrase on the terminal: a follower waits for ever."""
    locked = tmp_path / "locked.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(pki.client_key), "-out", str(locked), "-aes256"]
        + ["-passout", "pass:secret"],
        check=True,
        capture_output=True,
    )
    env = otlp_environment(
        {
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(pki.client),
            "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(locked),
        }
    )
    tls = Tls.of(env, "traces")
    assert tls is not None
    with pytest.raises(ExportError, match=r"CLIENT_KEY: .*locked\.key is encrypted; give the key"):
        tls.context()


def test_the_transport_alone_takes_a_tls(pki):
    env = otlp_environment({"OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca)})
    with (
        tls_backend(pki) as (seen, url),
        OtlpHttp(endpoints_from(url), tls=Tls.of(env, "traces")) as sender,
    ):
        assert sender.send("traces", b"{}") is None
    assert seen.paths == ["/v1/traces"]
