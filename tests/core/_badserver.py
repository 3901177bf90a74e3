"""An HTTP server on 127.0.0.1 whose misbehaviours can be switched on one by one, for the
remote consistency tests (issue 21): it can ignore ``If-Match``/``If-Unmodified-Since``, send
no validators or a weak ETag, ignore ``Range`` (answering 200 with the whole body, streamed
lazily so that the bytes it really sent can be counted), answer without ``Content-Length``
(chunked), stall before answering, or answer a range other than the one asked.

Objects are versioned: each :meth:`BadServer.put` gives the object a new ETag (``"v<n>"``)
and a Last-Modified one second later than the previous version.
"""

from __future__ import annotations

import http.server
import re
import threading
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_CHUNK = 1 << 20


class Lazy:
    """An object of ``size`` bytes: ``head`` then zeros, never held in memory whole."""

    def __init__(self, head: bytes, size: int) -> None:
        self.head, self.size = head, size

    def chunks(self, start: int, end: int) -> Any:
        pos = start
        while pos < end:
            if pos < len(self.head):
                piece = self.head[pos : min(end, len(self.head))]
            else:
                piece = bytes(min(_CHUNK, end - pos))
            yield piece
            pos += len(piece)


class Whole:
    def __init__(self, data: bytes) -> None:
        self.data, self.size = data, len(data)

    def chunks(self, start: int, end: int) -> Any:
        for a in range(start, end, _CHUNK):
            yield self.data[a : min(end, a + _CHUNK)]


@dataclass
class Behaviour:
    validators: str = "strong"  # strong, weak, lastmod, none
    ignore_preconditions: bool = False
    ignore_range: bool = False
    chunked: bool = False
    stall: str | None = None  # "head", "get" or "all": wait (until teardown) before answering
    shift: int = 0  # answer the range asked moved by this many bytes (Content-Range says so)
    log: list[tuple[str, str | None, dict[str, str]]] = field(default_factory=list)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
        self._serve(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        srv = self.server
        b: Behaviour = srv.behaviour
        b.log.append((self.command, self.headers.get("Range"), dict(self.headers)))
        if b.stall in ("all", "head" if head else "get"):
            srv.release.wait(60)
            self.close_connection = True
            return
        got = srv.objects.get(self.path)
        if got is None:
            self._answer(404, {}, Whole(b"not found"), 0, 9, head)
            return
        obj, version = got
        headers = {"Accept-Ranges": "bytes"}
        etag = f'"v{version}"'
        if b.validators == "weak":
            etag = "W/" + etag
        if b.validators in ("strong", "weak"):
            headers["ETag"] = etag
        stamp = 1_700_000_000 + version
        if b.validators != "none":
            headers["Last-Modified"] = formatdate(stamp, usegmt=True)
        if not b.ignore_preconditions:
            want = self.headers.get("If-Match")
            # strong comparison (RFC 9110 13.1.1): a weak ETag never matches
            if want is not None and (b.validators != "strong" or want != etag):
                self._answer(412, {}, Whole(b""), 0, 0, head)
                return
            since = self.headers.get("If-Unmodified-Since")
            if since is not None and b.validators != "none":
                if stamp > parsedate_to_datetime(since).timestamp():
                    self._answer(412, {}, Whole(b""), 0, 0, head)
                    return
        rng = self.headers.get("Range")
        m = _RANGE.match(rng or "")
        if head or b.ignore_range or m is None:
            self._answer(200, headers, obj, 0, obj.size, head)
            return
        start = int(m.group(1)) + b.shift
        end = min(obj.size, int(m.group(2)) + 1 if m.group(2) else obj.size)
        end = min(obj.size, end + b.shift)
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{obj.size}"
        self._answer(206, headers, obj, start, end, head)

    def _answer(
        self, code: int, headers: dict[str, str], obj: Any, start: int, end: int, head: bool
    ) -> None:
        srv = self.server
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        chunked = srv.behaviour.chunked
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if head:
            return
        try:
            for piece in obj.chunks(start, end):
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                else:
                    self.wfile.write(piece)
                with srv.lock:
                    srv.sent += len(piece)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client had what it wanted


class _Quiet(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a client hanging up is expected


class BadServer:
    """A :class:`ThreadingHTTPServer` on 127.0.0.1 with switchable misbehaviours
    (``behaviour``), counting the body bytes it really sent (``sent``)."""

    def __init__(self) -> None:
        self.httpd = _Quiet(("127.0.0.1", 0), _Handler)
        h: Any = self.httpd
        h.objects = {}
        h.behaviour = Behaviour()
        h.release = threading.Event()
        h.lock = threading.Lock()
        h.sent = 0
        self._versions = 0
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def behaviour(self) -> Behaviour:
        return self.httpd.behaviour  # type: ignore[attr-defined, no-any-return]

    @property
    def sent(self) -> int:
        return self.httpd.sent  # type: ignore[attr-defined, no-any-return]

    def reset(self) -> None:
        h: Any = self.httpd
        h.behaviour = Behaviour()
        with h.lock:
            h.sent = 0

    def put(self, name: str, data: bytes | Lazy) -> str:
        self._versions += 1
        obj = data if isinstance(data, Lazy) else Whole(data)
        self.httpd.objects["/" + name] = (obj, self._versions)  # type: ignore[attr-defined]
        return self.url(name)

    def url(self, name: str) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/{name}"

    def __enter__(self) -> BadServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.release.set()  # type: ignore[attr-defined]
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
