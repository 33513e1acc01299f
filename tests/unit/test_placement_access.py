"""Whether the operator runs the planned placement: only where it may watch Nodes and every pod."""

import logging
from dataclasses import dataclass, field

import pytest

from autoscaler.cli.operator_command import with_allowed_placement
from autoscaler.cli.pod_settings import SettingsError
from autoscaler.clients.kube import Resource
from autoscaler.controller.builders import PodSettings
from autoscaler.controller.runner import OperatorConfig

GPU = "nvidia.com/gpu"


@dataclass
class Reviews:
    """A client answering access reviews: everything allowed but `denied` (`verb plural`)."""

    denied: set[str] = field(default_factory=set)
    asked: list[str] = field(default_factory=list)

    def may(self, verb: str, resource: Resource) -> bool:
        self.asked.append(f"{verb} {resource.plural}")
        return f"{verb} {resource.plural}" not in self.denied


def config(resource: str | None = GPU) -> OperatorConfig:
    return OperatorConfig(pods=PodSettings(placement_resource=resource))


UPSTREAM_RBAC = {"list nodes", "watch nodes"}  # upstream's ClusterRole grants no Nodes


def test_allowed_the_placement_stays_on() -> None:
    kube = Reviews()
    assert with_allowed_placement(config(), kube, asked=False) == config()  # type: ignore[arg-type]
    assert kube.asked == ["list nodes", "watch nodes", "list pods", "watch pods", "patch pods"]


def test_the_default_without_its_rbac_turns_off_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        got = with_allowed_placement(config(), Reviews(UPSTREAM_RBAC), asked=False)  # type: ignore[arg-type]
    assert got.pods.placement_resource is None
    assert got.pods.init == config().pods.init  # nothing else changes
    assert [r.getMessage() for r in caplog.records] == [
        "the planned placement is off, kube-scheduler places every pod: the operator may not "
        "list nodes, watch nodes (deploy/operator/rbac.yaml grants them)"
    ]


def test_asked_for_without_its_rbac_is_an_error() -> None:
    with pytest.raises(SettingsError, match=r"^--planned-placement nvidia.com/gpu: the operator "
                       r"may not patch pods \("):  # fmt: skip
        with_allowed_placement(config(), Reviews({"patch pods"}), asked=True)  # type: ignore[arg-type]


def test_turned_off_nothing_is_asked() -> None:
    kube = Reviews(UPSTREAM_RBAC)
    assert with_allowed_placement(config(None), kube, asked=True) == config(None)  # type: ignore[arg-type]
    assert kube.asked == []
