"""Process and polling helpers for the real test environment (only PIDs we started are touched)."""

from __future__ import annotations

import errno
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


class StartupError(RuntimeError):
    """A test-environment component did not come up; the message carries the log tail."""


def free_port() -> int:
    """A currently free loopback TCP port (racy by nature; callers retry on bind failure)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path | None, *, lines: int = 40) -> str:
    if path is None or not path.exists():
        return "(no log)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:]) or "(empty log)"


def start_process(
    argv: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start argv in its own session (so a Ctrl-C on pytest does not hit it first)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        # Popen dups the descriptor, so closing ours right away is safe.
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )


def stop_process(proc: subprocess.Popen[bytes], *, timeout: float = 15.0) -> int | None:
    """SIGTERM, wait up to timeout, then SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    return proc.returncode


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.2,
    what: str,
    log_path: Path | None = None,
    proc: subprocess.Popen[bytes] | None = None,
    retry_on: tuple[type[Exception], ...] = (OSError,),
) -> float:
    """Poll predicate until true; returns the seconds waited. Fails fast if proc exits.

    Exceptions in retry_on (connection refused, resets, ...) count as "not yet"; any other
    exception is a bug and propagates at once.
    """
    start = time.monotonic()
    deadline = start + timeout
    last_error: BaseException | None = None
    while True:
        try:
            if predicate():
                return time.monotonic() - start
        except Exception as exc:
            last_error = exc
        if proc is not None and proc.poll() is not None:
            raise StartupError(
                f"{what}: process exited with code {proc.returncode}\n"
                f"--- log tail ({log_path}) ---\n{log_tail(log_path)}"
            )
        if time.monotonic() >= deadline:
            raise StartupError(
                f"timed out after {timeout:.0f}s waiting for {what}"
                f" (last probe error: {last_error!r})\n"
                f"--- log tail ({log_path}) ---\n{log_tail(log_path)}"
            )
        time.sleep(interval)


def http_get(
    url: str, *, token: str | None = None, cafile: Path | None = None, timeout: float = 2.0
) -> tuple[int, str]:
    """GET url; TLS is verified against cafile if given, else unverified. Returns (status, body)."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
    if cafile is None:  # Loopback test servers only; callers that know the CA should pass it.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status), response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(errors="replace")


def port_in_use(log_path: Path) -> bool:
    """Whether a failed start looks like a lost race for a port."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return "address already in use" in text or os.strerror(errno.EADDRINUSE) in text


def process_gone(pid: int) -> bool:
    """Whether no process has the PID (a zombie still has it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
