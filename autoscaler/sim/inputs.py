"""A comparison's inputs from files, recognising each supported format by its content.

- profiles: a folder of ElasticFlow-style profile CSVs (`autoscaler.sim.profiles`), or a folder of
  Pollux traces (`<model>/placements.csv`, `autoscaler.sim.pollux`); None = the bundled A100 ones;
- workload: a workload CSV (`autoscaler.sim.workload`), or a Pollux workload (header
  `name,time,application,num_replicas,batch_size`, whose profiles must then be Pollux traces);
  None = the bundled one.
"""

from collections.abc import Mapping
from pathlib import Path

from autoscaler.sim.bundled import bundled_profiles, bundled_workload
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.importers import import_pollux_workload
from autoscaler.sim.pollux import load_pollux_profiles
from autoscaler.sim.profiles import Profile, csv_records, load_profiles
from autoscaler.sim.workload import WorkloadJob, parse_workload, read_text

POLLUX_WORKLOAD = ["name", "time", "application", "num_replicas", "batch_size"]


def is_pollux_traces(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("*/placements.csv"))


def read_profiles(folder: Path | None) -> dict[str, Profile]:
    if folder is None:
        return bundled_profiles()
    if is_pollux_traces(folder):
        return load_pollux_profiles(folder)
    return load_profiles(folder)


def read_workload(
    path: Path | None, *, profiles: Mapping[str, Profile], traces: Path | None = None
) -> tuple[WorkloadJob, ...]:
    """The jobs of `path`, checked against `profiles`; `traces` = the Pollux traces folder."""
    if path is None:
        return bundled_workload(dict(profiles))
    text = read_text(path)
    first = next(csv_records(text), None)
    if first is not None and first[1] == POLLUX_WORKLOAD:
        if traces is None or not is_pollux_traces(traces):
            reason = "a Pollux workload needs the Pollux traces folder as its profiles"
            raise SimInputError(path, first[0], reason)
        return import_pollux_workload(path, traces=traces, profiles=profiles)
    return parse_workload(text, source=str(path), profiles=profiles)


def read_inputs(
    workload: Path | None, profiles: Path | None
) -> tuple[tuple[WorkloadJob, ...], dict[str, Profile]]:
    """(jobs, profiles) from the two paths (None = bundled)."""
    loaded = read_profiles(profiles)
    return read_workload(workload, profiles=loaded, traces=profiles), loaded
