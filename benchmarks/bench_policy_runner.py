"""What process isolation costs a round: `python -m benchmarks.bench_policy_runner [--jobs N]`.

The same snapshot (5,000 jobs by default, each with three observed counts) decided by `static`
(which keeps every count, so the figure is the runner's cost, not a solver's) through the
`ThreadRunner` and the `ProcessRunner`; and the snapshot's pickle round trip alone (what crosses
the pipe to the worker). Best and median of 7 calls each, after one warm-up call.
"""

import argparse
import pickle
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from autoscaler.engine.policy_runner import PluginSpec, PolicyRunner, ProcessRunner, ThreadRunner
from autoscaler.policies.contract import Snapshot
from autoscaler.policies.registry import build, find

POLICY = "static"
GPU = "nvidia.com/gpu"


def snapshot_of(jobs: int) -> Snapshot:
    return Snapshot.model_validate(
        {
            "capacity": {GPU: 4.0 * jobs},
            "jobs": [
                {
                    "namespace": f"team-{i % 50}",
                    "name": f"job-{i}",
                    "min_replicas": 1,
                    "max_replicas": 8,
                    "replicas": 2,
                    "resources_per_replica": {GPU: 1.0},
                    "throughput": {1: 100.0, 2: 190.0, 4: 350.0},
                    "throughput_age_seconds": {1: 60.0, 4: 300.0},
                    "age_seconds": 3600.0,
                    "seconds_since_rescale": 600.0,
                    "attained_seconds": 7200.0,
                    "remaining_samples": 1e6,
                }
                for i in range(jobs)
            ],
        }
    )


def timed(call: Callable[[], object], *, repeats: int = 7) -> tuple[float, float]:
    """(best, median) seconds of `call`, after one warm-up."""
    call()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return min(seconds), statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    view, now = snapshot_of(args.jobs), datetime.now(UTC)
    print(f"snapshot of {args.jobs} jobs: {len(pickle.dumps(view)) / 1e6:.2f} MB pickled")
    best, median = timed(lambda: pickle.loads(pickle.dumps(view)))
    print(f"pickle round trip: best {best:.3f} s, median {median:.3f} s")
    runners: dict[str, PolicyRunner] = {
        "thread": ThreadRunner(build(find(POLICY), {}), name=POLICY, timeout=60),
        "process": ProcessRunner(
            PluginSpec.of(POLICY, {}), name=POLICY, timeout=60, max_memory_mb=4096
        ),
    }
    try:
        for mode, runner in runners.items():
            result = runner.decide(view, now=now)
            if result.fallback or len(result.decisions) != args.jobs:
                raise SystemExit(f"{mode} runner: {result.fallback or 'decisions missing'}")
            best, median = timed(lambda runner=runner: runner.decide(view, now=now))
            print(f"{mode} runner, a round's decide: best {best:.3f} s, median {median:.3f} s")
    finally:
        for runner in runners.values():
            runner.close()


if __name__ == "__main__":  # the spawned worker imports this module: no run there
    main()
