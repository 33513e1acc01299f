"""A loopback HTTPS proxy between one process and kube-apiserver, to break things precisely.

The process gets a kubeconfig whose server is the proxy (`kubeconfig`); the proxy serves TLS with
the control plane's own serving certificate (its SAN is 127.0.0.1, so the client's verification
against the control plane's CA passes) and forwards every request to the real server. It

- logs each exchange: method, path, when it arrived, when it was answered, the status, and the
  JSON body of a write (`exchanges`, `writes`);
- SIGKILLs the process when a request matches (`kill_on`): `before` forwarding it (the process
  decided, the server never saw the write) or `after` the server answered it (the write is
  done, the process never learns it);
- runs a write of the test's own just before forwarding a matching request (`interfere_on`),
  so that request meets a changed object: a 409 Conflict for a write of an older version;
- cuts the process off (`cut`): requests that still come are read and logged with no status,
  and an answer the server sends after the cut to a request forwarded before it is not passed on;
  `refused`: open connections are torn down and each request is answered by closing its
  connection (the server is down: the client fails at once); `silent`: nothing is answered and
  no connection closes (a partition: the client waits for its own timeouts). `restore` ends it.

Requests are parsed only as far as HTTP/1.1 framing needs (Content-Length or chunked), so watches
stream through unchanged. Only what this module started is stopped by `close`.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from tests.support.controlplane import ControlPlane

Match = Callable[[str, str], bool]  # (method, path without query) -> whether the rule fires
REVIEWS = "/apis/authorization.k8s.io/"  # SelfSubjectAccessReviews
READS = ("GET", "HEAD", "OPTIONS")


@dataclass(frozen=True)
class Exchange:
    method: str
    path: str  # without the query
    query: str
    arrived: float  # time.time() when the proxy had the whole request
    status: int | None  # None: never forwarded (cut off, or the process was killed first)
    # time.time() when the server's answer arrived; None: never forwarded, or forwarded before a
    # cut and answered after it (the answer is not passed on: the process never hears it)
    answered: float | None
    body: Any = None  # a write's JSON body

    @property
    def write(self) -> bool:
        """A request that changes the cluster: not a read, nor an access review (a POST that
        stores nothing: the operator asks what its RBAC allows at start)."""
        return self.method not in READS and not self.path.startswith(REVIEWS)


@dataclass
class _Interference:
    match: Match
    action: Callable[[], object]
    left: int  # how many more matching requests it comes before


@dataclass
class _Kill:
    match: Match
    when: Literal["before", "after"]
    process: subprocess.Popen[bytes]
    fired: threading.Event


class ApiProxy:
    def __init__(self, control_plane: ControlPlane) -> None:
        upstream = urlsplit(control_plane.url)
        self._upstream = (upstream.hostname or "127.0.0.1", upstream.port or 443)
        pki = control_plane.workdir / "pki"
        self._serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._serving.load_cert_chain(pki / "server.crt", pki / "server.key")
        self._client = ssl.create_default_context(cafile=str(control_plane.ca_path))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._kills: list[_Kill] = []
        self._interferences: list[_Interference] = []
        self._sockets: set[socket.socket] = set()
        self._cut: Literal["", "refused", "silent"] = ""
        self._healed = threading.Event()  # set while not cut silently: held connections may end
        self._healed.set()
        self._upstreams: set[socket.socket] = set()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, name="apiproxy", daemon=True)
        self._accepting.start()

    # -- what tests use -------------------------------------------------------------------------

    def kubeconfig(self, source: Path, target: Path) -> Path:
        """`source` with its server replaced by this proxy, written to `target`."""
        config = yaml.safe_load(source.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = self.url
        target.write_text(yaml.safe_dump(config))
        target.chmod(0o600)
        return target

    def kill_on(
        self,
        match: Match,
        process: subprocess.Popen[bytes],
        *,
        when: Literal["before", "after"],
    ) -> threading.Event:
        """SIGKILL `process` at the first request `match`es ("after": the first the server
        carried out, answered 2xx); the event is set once it did."""
        kill = _Kill(match, when, process, threading.Event())
        with self._lock:
            self._kills.append(kill)
        return kill.fired

    def interfere_on(self, match: Match, action: Callable[[], object], *, times: int = 1) -> None:
        """Run `action` just before each of the next `times` requests `match` is forwarded."""
        with self._lock:
            self._interferences.append(_Interference(match, action, times))

    def cut(self, how: Literal["refused", "silent"] = "refused") -> float:
        """Cut the process off from the API server; returns when (time.time())."""
        with self._lock:
            self._cut = how
            if how == "silent":
                self._healed.clear()
            # Silent: only the server's side goes; the process's connections stay open, unanswered.
            sockets = list(self._sockets if how == "refused" else self._upstreams)
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return time.time()

    def restore(self) -> None:
        with self._lock:
            self._cut = ""
        self._healed.set()

    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    def writes(self, match: Match = lambda method, path: True) -> list[Exchange]:
        return [e for e in self.exchanges if e.write and match(e.method, e.path)]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        self._healed.set()
        with suppress(OSError):  # wakes the blocked accept(); a close alone does not
            self._listener.shutdown(socket.SHUT_RDWR)
        with suppress(OSError):
            self._listener.close()
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._accepting.join(timeout=5)
        for thread in list(self._threads):
            thread.join(timeout=5)

    # -- the proxy ------------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return  # closed
            thread = threading.Thread(target=self._serve, args=(raw,), daemon=True)
            with self._lock:
                if self._closed:
                    raw.close()
                    return
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
            thread.start()

    def _serve(self, raw: socket.socket) -> None:
        upstream: ssl.SSLSocket | None = None
        conn: socket.socket = raw
        self._track(raw)
        try:
            raw.settimeout(30)
            conn = self._serving.wrap_socket(raw, server_side=True)  # raw is detached now
            self._untrack(raw)
            self._track(conn)
            conn.settimeout(None)
            client = _Stream(conn)
            while True:
                request = client.read_request()
                if request is None:
                    return
                head, method, target, body = request
                path, _, query = target.partition("?")
                arrived = time.time()
                kill = self._rule(method, path)
                if self._is_cut() or (kill is not None and kill.when == "before"):
                    self._log(Exchange(method, path, query, arrived, None, None, _json(body)))
                    if kill is not None:
                        self._fire(kill)
                    self._healed.wait()  # a silent cut holds the request unanswered
                    return
                self._interfere(method, path)
                if upstream is None:
                    upstream = self._connect()
                upstream.sendall(head + body)
                answer = _Stream(upstream)
                status, response_head, framing = answer.read_response_head(method)
                answered = time.time()  # before the check: a cut after it is timed later
                if self._is_cut():  # cut while the server worked on it: the process never hears
                    self._log(Exchange(method, path, query, arrived, status, None, _json(body)))
                    self._healed.wait()
                    return
                self._log(Exchange(method, path, query, arrived, status, answered, _json(body)))
                kill = self._carried_out(kill, status)
                if kill is not None:  # "after": the server did it; the process never hears
                    self._fire(kill)
                    return
                conn.sendall(response_head)
                answer.relay_body(framing, conn)
                if framing == "close":
                    return
        except (OSError, ssl.SSLError, ValueError):
            # A torn-down connection (cut, kill, close) ends this exchange; in a silent cut the
            # process's side stays open and unanswered.
            self._healed.wait()
        finally:
            for sock in (conn, raw, upstream):
                if sock is not None:
                    self._untrack(sock)
                    with suppress(OSError):
                        sock.close()

    def _connect(self) -> ssl.SSLSocket:
        sock = socket.create_connection(self._upstream, timeout=30)
        sock.settimeout(None)
        wrapped = self._client.wrap_socket(sock, server_hostname=self._upstream[0])
        self._track(wrapped)
        with self._lock:
            self._upstreams.add(wrapped)
        return wrapped

    def _rule(self, method: str, path: str) -> _Kill | None:
        with self._lock:
            for kill in self._kills:
                if not kill.fired.is_set() and kill.match(method, path):
                    self._kills.remove(kill)
                    return kill
        return None

    def _carried_out(self, kill: _Kill | None, status: int) -> _Kill | None:
        """`kill` if the server did the request; a refused one (a 409: nothing done) re-arms it."""
        if kill is None or 200 <= status < 300:
            return kill
        with self._lock:
            self._kills.append(kill)
        return None

    def _interfere(self, method: str, path: str) -> None:
        with self._lock:
            due = [i for i in self._interferences if i.left > 0 and i.match(method, path)]
            for interference in due:
                interference.left -= 1
        for interference in due:
            interference.action()

    @staticmethod
    def _fire(kill: _Kill) -> None:
        with suppress(ProcessLookupError):
            kill.process.send_signal(signal.SIGKILL)
        kill.process.wait(timeout=10)
        kill.fired.set()

    def _is_cut(self) -> bool:
        with self._lock:
            return bool(self._cut)

    def _log(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
            self._upstreams.discard(sock)


class _Stream:
    """Buffered reads of HTTP/1.1 messages from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def _head(self) -> bytes | None:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                if self.buffer:
                    raise ValueError("connection closed inside a message head")
                return None
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise ValueError("connection closed inside a message body")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise ValueError("connection closed inside a chunk")
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line + b"\r\n"

    def read_request(self) -> tuple[bytes, str, str, bytes] | None:
        head = self._head()
        if head is None:
            return None
        method, target = head.split(b"\r\n", 1)[0].decode().split(" ")[:2]
        headers = _headers(head)
        if "chunked" in headers.get("transfer-encoding", ""):
            raise ValueError("chunked requests are not expected from these clients")
        body = self._exactly(int(headers.get("content-length", "0")))
        return head, method, target, body

    def read_response_head(self, method: str) -> tuple[int, bytes, str]:
        """Status, the raw head, and how its body is framed (a length, chunked, or close)."""
        head = self._head()
        if head is None:
            raise ValueError("the server closed the connection")
        status = int(head.split(b" ", 2)[1])
        headers = _headers(head)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, head, "0"
        if "chunked" in headers.get("transfer-encoding", ""):
            return status, head, "chunked"
        if "content-length" in headers:
            return status, head, headers["content-length"]
        return status, head, "close"

    def relay_body(self, framing: str, to: socket.socket) -> None:
        if framing == "chunked":
            while True:
                line = self._line()
                size = int(line.split(b";")[0], 16)
                to.sendall(line + self._exactly(size + 2))
                if size == 0:
                    return
        elif framing == "close":
            to.sendall(self.buffer)
            self.buffer = b""
            while self._fill():
                to.sendall(self.buffer)
                self.buffer = b""
        else:
            to.sendall(self._exactly(int(framing)))


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    pairs = (line.split(":", 1) for line in lines if ":" in line)
    return {name.strip().lower(): value.strip() for name, value in pairs}


def _json(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


@contextmanager
def api_proxy(control_plane: ControlPlane) -> Iterator[ApiProxy]:
    """A proxy to `control_plane`'s API server, closed on exit."""
    proxy = ApiProxy(control_plane)
    try:
        yield proxy
    finally:
        proxy.close()
