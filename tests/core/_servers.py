"""Real servers on 127.0.0.1 for the remote-read tests, each counting requests and bytes.

* :class:`RangeServer`: a small ``http.server`` that serves in-memory objects with ``HEAD``,
  ``GET`` with one ``Range`` (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``: 206 + Content-Range),
  strong ETags and ``If-Match`` (412 when the object changed).
* :class:`S3Server`: moto's ``ThreadedMotoServer`` with a WSGI wrapper that counts requests.

Both record ``log``: one ``(method, path, range header, body bytes sent)`` per request.
"""

from __future__ import annotations

import hashlib
import http.server
import re
import threading
from typing import Any

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _object(self) -> bytes | None:
        return self.server.objects.get(self.path.split("?", 1)[0])

    def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        # logged before the body goes out: the client may go on as soon as it has it
        self.server.log.append(
            (
                self.command,
                self.path,
                self.headers.get("Range"),
                len(body) * (self.command != "HEAD"),
            )
        )
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        if self.server.down:  # stopped: drop kept-alive connections without an answer
            self.close_connection = True
            return
        data = self._object()
        if data is None:
            self._send(404, b"not found", {})
            return
        etag = '"' + hashlib.md5(data).hexdigest() + '"'
        base = {"ETag": etag, "Accept-Ranges": "bytes"}
        want = self.headers.get("If-Match")
        if want is not None and want != etag:
            self._send(412, b"precondition failed", {})
            return
        rng = self.headers.get("Range")
        if rng is None:
            if self.command == "HEAD":
                self.server.log.append(("HEAD", self.path, None, 0))
                self.send_response(200)
                for k, v in base.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                return
            self._send(200, data, base)
            return
        m = _RANGE.match(rng)
        if not m or (not m.group(1) and not m.group(2)):
            self._send(416, b"", {})
            return
        n = len(data)
        if not m.group(1):
            start, end = max(0, n - int(m.group(2))), n - 1
        else:
            start = int(m.group(1))
            end = min(int(m.group(2)), n - 1) if m.group(2) else n - 1
        if start >= n or end < start:
            self._send(416, b"", {"Content-Range": f"bytes */{n}"})
            return
        self._send(
            206, data[start : end + 1], {**base, "Content-Range": f"bytes {start}-{end}/{n}"}
        )


class RangeServer:
    """An HTTP server honouring Range and If-Match; ``url(name)`` of an object put with
    :meth:`put`."""

    def __init__(self) -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.objects = {}  # type: ignore[attr-defined]
        self.httpd.log = []  # type: ignore[attr-defined]
        self.httpd.down = False  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def log(self) -> list[tuple[str, str, str | None, int]]:
        return self.httpd.log  # type: ignore[attr-defined, no-any-return]

    def put(self, name: str, data: bytes) -> str:
        self.httpd.objects["/" + name] = data  # type: ignore[attr-defined]
        return self.url(name)

    def url(self, name: str) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/{name}"

    def __enter__(self) -> RangeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.down = True  # type: ignore[attr-defined]
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class _Counting:
    """WSGI middleware: one log row per request, with the body bytes sent."""

    def __init__(self, app: Any, log: list) -> None:
        self.app = app
        self.log = log

    def __call__(self, environ: dict, start_response: Any) -> Any:
        body = self.app(environ, start_response)
        sent = 0
        chunks = []
        for chunk in body:
            sent += len(chunk)
            chunks.append(chunk)
        if hasattr(body, "close"):
            body.close()
        if environ.get("REQUEST_METHOD") == "HEAD":
            sent = 0
        self.log.append(
            (
                environ.get("REQUEST_METHOD"),
                environ.get("PATH_INFO"),
                environ.get("HTTP_RANGE"),
                sent,
            )
        )
        return chunks


class S3Server:
    """moto's S3 in server mode on 127.0.0.1 (a real HTTP endpoint), counting requests."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.log: list[tuple[str, str, str | None, int]] = []

    def __enter__(self) -> S3Server:
        import logging

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        self.server.start()
        srv = self.server._server
        srv.app = _Counting(srv.app, self.log)  # type: ignore[union-attr]
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "eu-west-1"},
            "skip_instance_cache": True,
            "use_listings_cache": False,
            **extra,
        }

    def filesystem(self, **extra: Any) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options(**extra))


class HttpFiles:
    """``files`` served by a :class:`RangeServer`: ``url(name)``, ``opts()`` (what
    ``tenfold.open`` needs besides the URL), ``replace(name, data)`` and the server's ``log``."""

    def __init__(self, srv: RangeServer, files: dict[str, bytes]) -> None:
        self.srv, self.log = srv, srv.log
        for k, v in files.items():
            srv.put(k, v)

    def url(self, name: str) -> str:
        return self.srv.url(name)

    def opts(self) -> dict[str, Any]:
        return {}

    def replace(self, name: str, data: bytes) -> None:
        self.srv.put(name, data)


class S3Files:
    """``files`` in bucket ``bucket`` of an :class:`S3Server`, with the same methods as
    :class:`HttpFiles`."""

    def __init__(self, srv: S3Server, files: dict[str, bytes], bucket: str) -> None:
        self.srv, self.log, self.bucket = srv, srv.log, bucket
        self.fs = srv.filesystem()
        self.fs.mkdir(bucket)
        for k, v in files.items():
            self.fs.pipe(f"{bucket}/{k}", v)

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def opts(self) -> dict[str, Any]:
        return {"storage_options": self.srv.storage_options()}

    def replace(self, name: str, data: bytes) -> None:
        self.fs.pipe(f"{self.bucket}/{name}", data)


def file_server_fixtures(bucket: str) -> tuple[Any, Any, Any]:
    """The module-scoped ``http`` and ``s3`` fixtures serving the test module's ``files``
    fixture, and ``server``, parametrized over both (assign them to those names in the module).
    """
    import pytest

    @pytest.fixture(scope="module")
    def http(files: dict[str, bytes]) -> Any:
        with RangeServer() as srv:
            yield HttpFiles(srv, files)

    @pytest.fixture(scope="module")
    def s3(files: dict[str, bytes]) -> Any:
        pytest.importorskip("s3fs", reason="s3fs is not installed")
        pytest.importorskip("moto.server", reason="moto[server] is not installed")
        with S3Server() as srv:
            yield S3Files(srv, files, bucket)

    @pytest.fixture(params=["http", "s3"])
    def server(request: Any) -> Any:
        return request.getfixturevalue(request.param)

    return http, s3, server
