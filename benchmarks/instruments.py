"""Measuring instruments of the benchmarks: a timing `Kube`, CPU and RSS readers, a sampler."""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.clients.kube import Kube

JSON = dict[str, Any]
TICKS = os.sysconf("SC_CLK_TCK")

# -- instrumentation (benchmark side only: a Kube that also times its calls) ----------------------


class TimedKube(Kube):
    """`Kube` plus per-call counts and seconds, split into send (request out, headers back)
    and read+parse (body read and `json.loads`). Behaviour is the parent's, unchanged."""

    def __init__(self, api: Any) -> None:
        super().__init__(api)
        self._stats_lock = threading.Lock()
        self._local = threading.local()
        self.calls: Counter[tuple[str, str]] = Counter()
        self.failed: Counter[tuple[str, str]] = Counter()
        self.total_s: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.send_s: defaultdict[tuple[str, str], float] = defaultdict(float)

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return super()._send(method, path, **kwargs)
        finally:
            self._local.send = time.perf_counter() - started

    def request(self, method: str, path: str, **kwargs: Any) -> JSON:
        self._local.send = 0.0
        started = time.perf_counter()
        ok = False
        try:
            data = super().request(method, path, **kwargs)
            ok = True
            return data
        finally:
            total = time.perf_counter() - started
            key = (method, _kind_of(path))
            with self._stats_lock:
                self.calls[key] += 1
                self.failed[key] += not ok
                self.total_s[key] += total
                self.send_s[key] += self._local.send

    def snapshot(self) -> KubeStats:
        with self._stats_lock:
            return KubeStats(
                requests=self.requests,
                writes=self.writes,
                calls=Counter(self.calls),
                failed=Counter(self.failed),
                total_s=dict(self.total_s),
                send_s=dict(self.send_s),
            )


@dataclass(frozen=True)
class KubeStats:
    """A `TimedKube`'s tallies at one moment, or (`diff`) between two: calls and seconds by
    (method, kind of path)."""

    requests: int
    writes: int
    calls: Counter[tuple[str, str]]
    failed: Counter[tuple[str, str]]
    total_s: dict[tuple[str, str], float]  # request out to body parsed
    send_s: dict[tuple[str, str], float]  # request out to headers back


def _kind_of(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        i = parts.index("namespaces") + 2
        rest = parts[i:]
    else:
        rest = parts[2:] if parts[0] == "api" else parts[3:]
    if not rest:
        return "?"
    kind = rest[0] + ("/{name}" if len(rest) > 1 else "")
    return kind + ("/" + rest[2] if len(rest) > 2 else "")


def diff(after: KubeStats, before: KubeStats) -> KubeStats:
    return KubeStats(
        requests=after.requests - before.requests,
        writes=after.writes - before.writes,
        calls=after.calls - before.calls,  # Counter subtraction drops zeros
        failed=after.failed - before.failed,
        total_s={k: v - before.total_s.get(k, 0.0) for k, v in after.total_s.items()},
        send_s={k: v - before.send_s.get(k, 0.0) for k, v in after.send_s.items()},
    )


def cpu_seconds_of(pid: int | str) -> float:
    """utime + stime of a process (or /proc/self/task/<tid>) from /proc, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def process_cpu(pids: Mapping[str, int | str]) -> dict[str, float]:
    """CPU seconds so far of each named process; one gone meanwhile is left out."""
    out = {}
    for name, pid in pids.items():
        with suppress(OSError):
            out[name] = cpu_seconds_of(pid)
    return out


def thread_cpu() -> dict[str, float]:
    """CPU seconds per live thread of this process, grouped by name (worker-*, informer-*...)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = defaultdict(float)
    for task in Path("/proc/self/task").iterdir():
        try:
            seconds = cpu_seconds_of(f"self/task/{task.name}")
        except OSError:
            continue
        name = names.get(int(task.name), "other")
        group = "worker-*" if name.startswith("worker-") else name
        group = "bench-*" if group.startswith(("bench", "ThreadPool")) else group
        out[group] += seconds
    return dict(out)


def status_kb(field_name: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return float(line.split()[1])
    return 0.0


def reset_peak_rss() -> bool:
    """Reset VmHWM (the kernel's peak RSS) so the next phase's peak can be read on its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Sampler:
    """A poor man's py-spy: samples every thread's stack every `interval` s (wall clock).

    For each thread group it counts the innermost frame and the innermost frame inside
    `autoscaler/`, and a coarse category (network wait, JSON, pydantic, ...).
    """

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.leaf: dict[str, Counter[str]] = defaultdict(Counter)
        self.ours: dict[str, Counter[str]] = defaultdict(Counter)
        self.category: dict[str, Counter[str]] = defaultdict(Counter)
        self.samples: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                name = names.get(ident, "?")
                if ident == me or not name.startswith(("worker-", "informer-")):
                    continue
                group = "worker-*" if name.startswith("worker-") else name
                self.samples[group] += 1
                self.leaf[group][_where(frame)] += 1
                self.category[group][_category(frame)] += 1
                f: Any = frame
                while f is not None and "/autoscaler/" not in f.f_code.co_filename:
                    f = f.f_back
                self.ours[group][_where(f, line=True) if f else "(outside autoscaler)"] += 1


def _where(frame: Any, *, line: bool = False) -> str:
    code = frame.f_code
    where = f"{Path(code.co_filename).name}:{code.co_name}"
    return f"{where}:{frame.f_lineno}" if line else where


_CATEGORIES: list[tuple[str, Callable[[str, str, set[str]], bool]]] = [
    ("idle (waiting for work)", lambda inner, chain, funcs: "workqueue.py" in chain),
    ("JSON decode", lambda inner, chain, funcs: "/json/" in inner),
    ("pydantic (PyTorchJob.model_validate)", lambda inner, chain, funcs: "pydantic" in chain),
    (
        "network wait (socket/TLS)",
        lambda inner, chain, funcs: any(f in inner for f in ("ssl.py", "socket.py", "client.py")),
    ),
    ("HTTP client (urllib3)", lambda inner, chain, funcs: "urllib3" in chain),
    ("kubernetes client (serialize/call_api)", lambda inner, chain, funcs: "kubernetes" in chain),
    (
        "plan (reconcile/builders)",
        lambda inner, chain, funcs: any(f in chain for f in ("reconcile.py", "builders.py")),
    ),
    (
        "operator code (informer/runner)",
        lambda inner, chain, funcs: any(f in chain for f in ("informer.py", "runner.py")),
    ),
]


def _category(frame: Any) -> str:
    files: list[tuple[str, str]] = []
    f = frame
    while f is not None:
        files.append((f.f_code.co_filename, f.f_code.co_name))
        f = f.f_back
    inner, chain, funcs = files[0][0], " ".join(n for n, _ in files), {fn for _, fn in files}
    return next((name for name, rule in _CATEGORIES if rule(inner, chain, funcs)), "other")
