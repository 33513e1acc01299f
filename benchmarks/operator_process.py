"""The operator in a process of its own, as deployed (bench_scale).

In a cluster the operator and the engine are separate Deployments; run on a thread of the
benchmark's process, the operator's informers and workers would share that process' interpreter
with the engine and lengthen its rounds. `OperatorProcess` starts a child (multiprocessing
`spawn`: the parent has threads, so no fork) that owns its own `TimedKube` and `Operator` and
answers, over a pipe, the few questions the benchmark asks of it. Every answer is awaited with a
deadline while watching the child: a child that dies or fails makes the call raise, never hang.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from autoscaler.api import coordinates as c
from autoscaler.clients.kube import api_client
from autoscaler.controller.runner import Operator, OperatorConfig
from benchmarks.cluster import noop_resync, start_operator, wait_quiet
from benchmarks.instruments import TimedKube

JSON = dict[str, Any]
POLL_SECONDS = 0.1
START_SECONDS = 120.0  # spawn, imports and the first LIST of every cache
ANSWER_SECONDS = 120.0  # a question without a wait of its own (counts, names)
STOP_SECONDS = 90.0  # the operator's drain: its workers and informers join within a minute


# -- pure helpers (unit-tested) --------------------------------------------------------------------


def pending_pod_names(pods: Iterable[JSON]) -> list[str]:
    """Pods not yet Running or finished (no phase yet counts as Pending), not being deleted."""
    return [
        pod["metadata"]["name"]
        for pod in pods
        if (pod.get("status") or {}).get("phase", "Pending") == "Pending"
        and not pod["metadata"].get("deletionTimestamp")
    ]


def jobs_with_active_worker(jobs: Iterable[JSON]) -> int:
    """Jobs whose status counts at least one active worker."""
    return sum(
        ((job.get("status") or {}).get("replicaStatuses") or {}).get(c.WORKER, {}).get("active", 0)
        >= 1
        for job in jobs
    )


@dataclass(frozen=True)
class Resync:
    writes: int  # the operator Kube's writes from the resync until `quiet` s after its passes
    passes: float  # reconcile passes it caused
    seconds: float  # until one pass per job had run and the queue was idle


# -- the benchmark's side --------------------------------------------------------------------------


class OperatorDiedError(RuntimeError):
    """The operator's process ended without being asked to."""


class OperatorProcess:
    """A running operator in a child process; each method asks it one thing and waits for the
    answer. Use as a context manager, or call `close()` in a `finally`."""

    def __init__(
        self,
        target: Callable[..., None],
        *args: Any,
        start_seconds: float = START_SECONDS,
        stop_seconds: float = STOP_SECONDS,
    ) -> None:
        """Start `target(conn, *args)` in a child and wait for its first answer (the operator's
        caches synced); `close()` gives it `stop_seconds` to stop before killing it."""
        self._stop_seconds = stop_seconds
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe(duplex=True)
        self._process = context.Process(
            target=target, args=(theirs, *args), name="operator", daemon=True
        )
        self._process.start()
        theirs.close()  # the child's end lives in the child: its exit is our EOF
        try:
            self._receive(seconds=start_seconds, what="starting (its caches to sync)")
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        """The child's process id (for reading its CPU time)."""
        return self._process.pid or 0

    @classmethod
    def start(cls, kubeconfig: str, config: OperatorConfig) -> OperatorProcess:
        return cls(serve, kubeconfig, config)

    def __enter__(self) -> OperatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cached_pods_and_services(self) -> tuple[int, int]:
        """How many pods and services its caches hold."""
        pods, services = self._ask("cached_pods_and_services", seconds=ANSWER_SECONDS)
        return pods, services

    def pending_pods(self) -> list[str]:
        """The names of the pods its cache holds as pending (see `pending_pod_names`)."""
        names: list[str] = self._ask("pending_pods", seconds=ANSWER_SECONDS)
        return names

    def jobs_active(self) -> int:
        """Jobs its cache shows with at least one active worker."""
        count: int = self._ask("jobs_active", seconds=ANSWER_SECONDS)
        return count

    def wait_quiet(self, *, quiet: float, timeout: float) -> None:
        """Until its queue is idle and it made no request for `quiet` s (`cluster.wait_quiet`)."""
        self._ask("wait_quiet", seconds=timeout + ANSWER_SECONDS, quiet=quiet, timeout=timeout)

    def noop_resync(self, *, quiet: float, timeout: float) -> Resync:
        """A resync of every job once everything settled, which should write nothing."""
        resync: Resync = self._ask(
            "noop_resync", seconds=timeout + quiet + ANSWER_SECONDS, quiet=quiet, timeout=timeout
        )
        return resync

    def close(self) -> None:
        """Ask the operator to stop and drain; kill it if it cannot. Never raises: it runs in a
        `finally`, where the benchmark's own error is the one to see."""
        try:
            if self._process.is_alive():
                self._conn.send(("stop", {}))
                self._receive(seconds=self._stop_seconds, what="stopping")
                self._process.join(timeout=self._stop_seconds)
        except (OSError, RuntimeError, TimeoutError) as error:
            print(f"operator process: {error}", file=sys.stderr, flush=True)
        finally:
            self._conn.close()
            if self._process.is_alive():
                self._process.kill()
            self._process.join()

    def _ask(self, command: str, *, seconds: float, **kwargs: Any) -> Any:
        try:
            self._conn.send((command, kwargs))
        except OSError as error:  # its end is closed: it has exited
            raise self._died(command) from error
        return self._receive(seconds=seconds, what=command)

    def _receive(self, *, seconds: float, what: str) -> Any:
        """The child's answer to `what`; raises if it died, failed or took over `seconds` s."""
        deadline = time.monotonic() + seconds
        while not self._conn.poll(POLL_SECONDS):  # EOF (the child gone) also ends the poll
            if not self._process.is_alive():
                raise self._died(what)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the operator process did not answer {what} in {seconds:.0f} s")
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError) as error:
            raise self._died(what) from error
        if kind == "error":
            raise RuntimeError(f"the operator process failed {what}:\n{value}")
        return value

    def _died(self, what: str) -> OperatorDiedError:
        self._process.join(timeout=5)
        return OperatorDiedError(
            f"the operator process died during {what} (exit code {self._process.exitcode})"
        )


# -- the child's side ------------------------------------------------------------------------------


class _Served:
    """The questions the child answers, each a method of the same name."""

    def __init__(self, op: Operator, kube: TimedKube) -> None:
        self.op, self.kube = op, kube

    def cached_pods_and_services(self) -> tuple[int, int]:
        return len(self.op.pods.items()), len(self.op.services.items())

    def pending_pods(self) -> list[str]:
        return pending_pod_names(self.op.pods.items())

    def jobs_active(self) -> int:
        return jobs_with_active_worker(self.op.jobs.items())

    def wait_quiet(self, *, quiet: float, timeout: float) -> None:
        wait_quiet(self.op, self.kube, quiet=quiet, timeout=timeout)

    def noop_resync(self, *, quiet: float, timeout: float) -> Resync:
        limits = argparse.Namespace(quiet=quiet, timeout=timeout)
        resync = noop_resync(self.op, self.kube, limits, jobs=len(self.op.jobs.items()))
        return Resync(
            writes=resync.after.writes - resync.before.writes,
            passes=resync.passes,
            seconds=resync.seconds,
        )


def serve(conn: Any, kubeconfig: str, config: OperatorConfig) -> None:
    """The child: start the operator, answer once its caches synced, then answer questions until
    told to stop (or the benchmark's end of the pipe closes); then stop the operator."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group; the parent stops us
    kube = TimedKube(api_client(kubeconfig=kubeconfig))
    try:
        op = Operator(kube, config=config)
        thread, stop = start_operator(op)
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return  # the operator's threads are daemons: they end with this process
    conn.send(("ok", None))
    served = _Served(op, kube)
    try:
        while True:
            try:
                command, kwargs = conn.recv()
            except EOFError:  # the benchmark is gone
                return
            if command == "stop":
                break
            try:
                conn.send(("ok", getattr(served, command)(**kwargs)))
            except Exception:
                conn.send(("error", traceback.format_exc()))
    finally:
        stop.set()
        thread.join(timeout=60)
        kube.close()
    conn.send(("ok", None))  # stopped
