"""torchft mode end to end: workers that join and leave while the others keep training."""

from __future__ import annotations

import time

import pytest

from autoscaler.api import coordinates as c
from tests.e2e.training import Scenario, wait_groups

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(900)]


def test_smoke(scenario: Scenario) -> None:
    scenario.nodes(2)
    job = scenario.torchft_job("ft")
    manifest = job.manifest(replicas=2, low=1, high=4, total_samples=60_000)
    manifest["metadata"]["annotations"][c.ANNOTATION_OPT_OUT] = "true"
    job.create(manifest)
    wait_groups(job, 2, timeout=180)
    written = job.scale(3)
    wait_groups(job, 3, after=written)
    print("join", time.time() - written)
