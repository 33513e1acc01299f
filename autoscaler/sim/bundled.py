"""The embedded default: ElasticFlow's A100 profiles and 72 ITP jobs on 64 GPUs (8 nodes x 8).

Read with importlib.resources, so it works from a wheel as well as from a checkout. How the data
was derived, and its licences, are in `autoscaler/sim/data/README.md`.
"""

from importlib.resources import files
from importlib.resources.abc import Traversable

from autoscaler.sim.profiles import Profile, parse_profile
from autoscaler.sim.simulation import SimConfig
from autoscaler.sim.workload import WorkloadJob, parse_workload

DEFAULT_CONFIG = SimConfig(gpus=64, gpus_per_node=8)


def _data() -> Traversable:
    return files("autoscaler.sim").joinpath("data")


def bundled_profiles() -> dict[str, Profile]:
    """The 7 A100 profiles, by name."""
    folder = _data().joinpath("profiles")
    entries = sorted((e for e in folder.iterdir() if e.name.endswith(".csv")), key=lambda e: e.name)
    return {
        entry.name.removesuffix(".csv"): parse_profile(
            entry.read_text(encoding="utf-8"),
            name=entry.name.removesuffix(".csv"),
            source=f"autoscaler/sim/data/profiles/{entry.name}",
        )
        for entry in entries
    }


def bundled_workload(profiles: dict[str, Profile] | None = None) -> tuple[WorkloadJob, ...]:
    """The default workload, checked against `profiles` (default: the bundled ones)."""
    text = _data().joinpath("workload.csv").read_text(encoding="utf-8")
    checked = profiles if profiles is not None else bundled_profiles()
    return parse_workload(text, source="autoscaler/sim/data/workload.csv", profiles=checked)
