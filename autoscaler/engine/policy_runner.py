"""Running a policy's `decide` within a time and a memory budget.

A policy is plug-in code: it may raise, hang or leak. The engine's round asks a `PolicyRunner`
for decisions and gets back either them or the reason every count must be kept this round:

- `ThreadRunner` calls the policy in a thread of the engine's process. A call over its budget is
  abandoned, not stopped (a thread cannot be), so until it returns later rounds fall back with
  `PolicyStillRunning`; a leak grows the engine itself. Fast and deterministic: the simulator
  and the unit tests use it.
- `ProcessRunner` calls it in a long-lived worker process (multiprocessing `spawn`), which is
  killed and replaced when a call overruns its budget, crashes, or grows past its memory limit.
  Only the worker's memory grows, and a hang costs one round (`PolicyTimeout`), not every round
  after. The default of `autoscaler engine`.

The worker loads the plug-in through the registry from plain data (its reference and config), so
the policy never crosses the process boundary, and nothing from the working directory (see
`_without_working_directory`). Its replies are plain rows, read back with an unpickler that
refuses every class: nothing a worker sends can make the engine import code.
"""

import gc
import io
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

from autoscaler.policies.contract import Decision, Policy, Snapshot
from autoscaler.policies.registry import build, find

log = logging.getLogger(__name__)

# The fallback reasons (each becomes the kept jobs' reason, a Warning Event and a
# `autoscaler_policy_fallbacks_total{reason}` sample).
FAILED = "PolicyFailed"
TIMEOUT = "PolicyTimeout"
STILL_RUNNING = "PolicyStillRunning"
INVALID = "PolicyInvalid"
OUT_OF_MEMORY = "PolicyOutOfMemory"
FALLBACKS = frozenset({FAILED, TIMEOUT, STILL_RUNNING, INVALID, OUT_OF_MEMORY})


def is_policy_fallback(reason: str) -> bool:
    """Whether `reason` is a fallback's: the policy failed, overran or returned nonsense, and
    every count is kept."""
    return reason in FALLBACKS


Row = tuple[str, str, int, str, str]


@dataclass(frozen=True)
class RunResult:
    """The policy's decisions, or none and the `fallback` reason every count must be kept."""

    decisions: tuple[Decision, ...] = ()
    fallback: str = ""
    replaced: str = ""  # why the call's worker was killed and replaced, if it was


class PolicyRunner(Protocol):
    def decide(self, snapshot: Snapshot, *, now: datetime) -> RunResult: ...

    def close(self) -> None: ...


class ThreadRunner:
    """The policy in a thread of this process, `timeout` seconds per call."""

    def __init__(self, policy: Policy, *, name: str, timeout: float) -> None:
        self.policy, self.name, self.timeout = policy, name, timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy")
        self._running: Future[Sequence[Decision]] | None = None

    def decide(self, snapshot: Snapshot, *, now: datetime) -> RunResult:
        if self._running is not None and not self._running.done():
            return RunResult(fallback=STILL_RUNNING)
        self._running = self._executor.submit(self.policy.decide, snapshot, now=now)
        try:
            decisions = self._running.result(timeout=self.timeout)
        except FutureTimeout:
            log.error("policy %s overran its %.1f s budget", self.name, self.timeout)
            return RunResult(fallback=TIMEOUT)
        except Exception:  # plug-in code: any failure keeps every count
            log.exception("policy %s failed", self.name)
            return RunResult(fallback=FAILED)
        rows = plain_rows(decisions)
        if rows is None:
            log_invalid(self.name)
            return RunResult(fallback=INVALID)
        return RunResult(decisions=tuple(Decision(*row) for row in rows))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def plain_rows(decisions: object) -> list[Row] | None:
    """The decisions as plain rows, or None unless they are `Decision`s with integer counts."""
    try:
        items = list(decisions)  # type: ignore[call-overload]
    except TypeError:
        return None
    if not all(isinstance(d, Decision) and type(d.replicas) is int for d in items):
        return None
    return [(d.namespace, d.name, d.replicas, d.reason, d.message) for d in items]


def log_invalid(name: str) -> None:
    log.error("policy %s returned something other than Decisions with integer counts", name)


@dataclass(frozen=True)
class PluginSpec:
    """What a worker needs to build the policy itself: plain, picklable data."""

    reference: str  # an installed plug-in's name, or an absolute path to a .py file
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, reference: str, config: dict[str, Any]) -> "PluginSpec":
        """A file reference made absolute here, so the worker loads the very file the engine
        validated whatever its working directory."""
        if reference.endswith(".py"):
            reference = str(Path(reference).resolve())
        return cls(reference=reference, config=dict(config))


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    ready: bool = False


class ProcessRunner:
    """The policy in a worker process: `timeout` seconds per call, `start_timeout` seconds to
    load, replaced when its resident memory passes `max_memory_mb`."""

    def __init__(
        self,
        spec: PluginSpec,
        *,
        name: str,
        timeout: float,
        max_memory_mb: float,
        start_timeout: float = 60.0,
        poll_seconds: float = 0.05,
    ) -> None:
        self.spec, self.name, self.timeout = spec, name, timeout
        self.max_memory_mb, self.start_timeout = max_memory_mb, start_timeout
        self.poll_seconds = poll_seconds
        self.replacements = 0  # workers killed and replaced, for logs and tests
        self._context = multiprocessing.get_context("spawn")
        self._worker: _Worker | None = self._start()  # loads while the first round observes

    @property
    def worker_pid(self) -> int | None:
        return self._worker.process.pid if self._worker else None

    def decide(self, snapshot: Snapshot, *, now: datetime) -> RunResult:
        worker = self._worker or self._start()
        self._worker = worker
        if not worker.ready:
            started = self._await_ready(worker)
            if started:
                return started
        try:
            worker.conn.send((snapshot, now))
        except OSError:  # it died between calls (e.g. killed by the kernel)
            return self._replace(FAILED, during="the wait for its next call")
        reply = self._receive(worker, seconds=self.timeout)
        if isinstance(reply, str):
            return self._replace(reply, during="its decision")
        kind, payload = reply
        if kind == "failed":
            log.error("policy %s failed:\n%s", self.name, payload)
            return RunResult(fallback=FAILED)
        decisions = _decisions(payload) if kind == "ok" else None
        if decisions is None:
            log_invalid(self.name)
            return RunResult(fallback=INVALID)
        recycled = self._recycle_if_grown(worker)
        return RunResult(decisions=decisions, replaced=OUT_OF_MEMORY if recycled else "")

    def close(self) -> None:
        if self._worker is not None:
            _stop(self._worker)
            self._worker = None

    def _start(self) -> _Worker:
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_serve, args=(theirs, self.spec), name=f"policy-{self.name}", daemon=True
        )
        with _without_working_directory():
            process.start()
        theirs.close()  # the worker's end lives in the worker: its exit is our EOF
        return _Worker(process=process, conn=ours)

    def _await_ready(self, worker: _Worker) -> RunResult | None:
        """None once the worker has built the policy, else why this round falls back."""
        reply = self._receive(worker, seconds=self.start_timeout)
        if isinstance(reply, str):
            return self._replace(reply, during="loading the plug-in")
        kind, payload = reply
        if kind != "ready":
            log.error("policy %s failed to load in its worker:\n%s", self.name, payload)
            return self._replace(FAILED, during="loading the plug-in", logged=True)
        worker.ready = True
        return None

    def _receive(self, worker: _Worker, *, seconds: float) -> tuple[str, Any] | str:
        """The worker's reply, or the fallback reason it gave none: over time, dead, or over
        its memory limit (checked while waiting, so a runaway allocation is stopped early)."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return TIMEOUT
            if worker.conn.poll(min(left, self.poll_seconds)):
                try:
                    reply: tuple[str, Any] = _plain_loads(worker.conn.recv_bytes())
                except (EOFError, OSError):
                    return FAILED
                except pickle.UnpicklingError:  # e.g. a str subclass in a message
                    return ("invalid", None)
                return reply
            if not worker.process.is_alive():
                return FAILED
            if _over(resident_mb(worker.process.pid), self.max_memory_mb):
                return OUT_OF_MEMORY

    def _replace(self, reason: str, *, during: str, logged: bool = False) -> RunResult:
        """Kill the worker and start its successor now, so it has loaded by the next round."""
        worker = self._worker
        assert worker is not None
        used = resident_mb(worker.process.pid)
        code = _stop(worker)
        self.replacements += 1
        if not logged:
            cause = {
                TIMEOUT: f"overran its {self._budget(worker):.1f} s budget",
                OUT_OF_MEMORY: f"passed its {self.max_memory_mb:g} MB memory limit ({used} MB)",
            }.get(reason, f"died (exit code {code})")
            log.error("policy %s %s during %s; worker replaced", self.name, cause, during)
        self._worker = self._start()
        return RunResult(fallback=reason, replaced=reason)

    def _budget(self, worker: _Worker) -> float:
        return self.timeout if worker.ready else self.start_timeout

    def _recycle_if_grown(self, worker: _Worker) -> bool:
        """A worker that grew past its limit across calls (a leak) is replaced after a good
        call: its decisions stand, the next call gets a fresh worker. True if it was."""
        used = resident_mb(worker.process.pid)
        if not _over(used, self.max_memory_mb):
            return False
        log.warning(
            "policy %s's worker uses %s MB, over its %g MB limit; worker replaced"
            " (a plug-in's state does not survive this)",
            self.name,
            used,
            self.max_memory_mb,
        )
        _stop(worker)
        self.replacements += 1
        self._worker = self._start()
        return True


_ENVIRONMENT = threading.Lock()


@contextmanager
def _without_working_directory() -> Iterator[None]:
    """Start a worker whose interpreter never puts its working directory on sys.path.

    multiprocessing boots a worker with `python -c ...`, which puts the working directory first
    on sys.path while the worker imports `multiprocessing` itself: a `multiprocessing/` there
    (say, in a job's checkout the engine runs from) would run in the worker. PYTHONSAFEPATH
    (Python 3.11) turns that off; it is set only while the worker starts, which inherits it.
    """
    with _ENVIRONMENT:
        before = os.environ.get("PYTHONSAFEPATH")
        os.environ["PYTHONSAFEPATH"] = "1"
        try:
            yield
        finally:
            if before is None:
                del os.environ["PYTHONSAFEPATH"]
            else:
                os.environ["PYTHONSAFEPATH"] = before


def _over(used: int | None, limit: float) -> bool:
    return used is not None and used > limit


def resident_mb(pid: int | None) -> int | None:
    """A process's resident memory (VmRSS) in MB, None when unknown (not Linux, or gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        return None
    return None


def _stop(worker: _Worker) -> int | None:
    """Kill the worker (if still running) and reap it; its exit code."""
    worker.conn.close()
    if worker.process.is_alive():
        worker.process.kill()  # SIGKILL: a hung plug-in ignores nothing else we could send
    worker.process.join(timeout=10)
    code = worker.process.exitcode
    if code is not None:
        worker.process.close()
    return code


def _decisions(payload: object) -> tuple[Decision, ...] | None:
    try:
        decisions = tuple(Decision(*row) for row in payload)  # type: ignore[attr-defined]
    except TypeError:
        return None
    return decisions if plain_rows(decisions) is not None else None


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a policy worker's reply may not name {module}.{name}")


def _plain_loads(data: bytes) -> Any:
    """A reply of builtins only: unpickling it can import nothing."""
    return _NoClasses(io.BytesIO(data)).load()


def _serve(conn: Connection, spec: PluginSpec) -> None:
    """The worker: build the policy, then answer `(snapshot, now)` requests until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the engine decides when its worker stops
    _exit_with(os.getppid())
    try:
        policy = build(find(spec.reference), spec.config)
    except Exception:  # plug-in code: report it, the engine falls back and retries
        conn.send(("failed", traceback.format_exc()))
        return
    conn.send(("ready", None))
    while True:
        try:
            snapshot, now = _receive_uncollected(conn)
        except EOFError:
            return
        try:
            rows = plain_rows(policy.decide(snapshot, now=now))
        except Exception:
            conn.send(("failed", traceback.format_exc()))
            continue
        conn.send(("ok", rows) if rows is not None else ("invalid", None))


def _receive_uncollected(conn: Connection) -> Any:
    """The next request, unpickled with the cyclic collector paused: unpickling makes no
    cycles, yet a large snapshot's tens of thousands of new objects set off collection after
    collection (measured by `make bench-scale`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return conn.recv()
    finally:
        if enabled:
            gc.enable()


def _exit_with(parent: int) -> None:
    """End the worker when the engine is gone, even mid-call (a hung call never reads EOF)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
