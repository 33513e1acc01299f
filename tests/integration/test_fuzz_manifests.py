"""A fixed-seed set of hypothesis-generated manifests (tests/support/manifest_strategies.py),
each judged by the real API server (the committed CRD, a dry-run create) and by `autoscaler
validate`: the same verdict and the same fields on every case, and `autoscaler render` never
fails on a job the server accepts. `make fuzz` runs the same with more cases and any seed."""

from pathlib import Path
from typing import Any

from kubernetes import client

from tests.support.manifest_strategies import drawn, manifests
from tests.support.manifest_verdicts import judge, summary

CASES = 200
SEED = 0


def test_server_and_validate_agree_on_generated_manifests(
    jobs: client.CustomObjectsApi, namespace: str, tmp_path: Path, crd: dict[str, Any]
) -> None:
    cases = [
        judge(job, jobs=jobs, namespace=namespace, workdir=tmp_path)
        for job in drawn(manifests(), cases=CASES, seed_value=SEED)
    ]
    accepted = sum(case.server.accepted for case in cases)
    # Both verdicts are exercised, not one side only.
    assert CASES // 4 <= accepted <= CASES * 3 // 4, summary(cases)
    assert not [case for case in cases if case.problems], summary(cases, shown=5)
