"""The goodput helper's measurements with real torch on loopback gloo (tiny linear model):
the smoothed noise scale approaches the exact one from per-sample gradients, at one replica (its
base batch as two half micro-batches: the same estimate as two replicas of half the batch) and at
two (with and without accumulation), and accumulation averages exactly the full batch's
gradient, the learning rate set by its rule."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.controlplane import REPO_ROOT

pytestmark = pytest.mark.timeout(300)
PROBE = REPO_ROOT / "tests" / "support" / "goodput_probe.py"
JSON = dict[str, Any]


@pytest.fixture(scope="module")
def results(torch_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, JSON]:
    """Every case's result, by case, from one probe process."""
    out = tmp_path_factory.mktemp("probe") / "out.jsonl"
    env = {"PATH": f"{torch_env / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run(
        ["python", str(PROBE), str(out)], env=env, check=True, timeout=240, cwd=REPO_ROOT
    )
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return {line["case"]: line for line in lines}


@pytest.mark.parametrize("case", ["phi-2x4", "phi-1x8", "phi-2x8x2"])
def test_the_noise_scale_matches_the_exact_one(results: dict[str, JSON], case: str) -> None:
    assert results[case]["phi"] == pytest.approx(results["exact"]["phi"], rel=0.2)


@pytest.mark.parametrize("case", ["accumulation-2x4x3", "accumulation-1x8x2"])
def test_accumulation_averages_the_full_batch(results: dict[str, JSON], case: str) -> None:
    result = results[case]
    assert result["max_error"] < 1e-5
    assert result["lr"] == pytest.approx(0.1 * result["lr_factor"])


def test_one_worker_measures_from_two_half_batches_what_two_workers_measure(
    results: dict[str, JSON],
) -> None:
    """One worker at the base batch runs it as two half micro-batches: the same samples and
    pieces as two workers of half the batch each, so the same estimate."""
    assert results["phi-1x8"]["phi"] == pytest.approx(results["phi-2x4"]["phi"], rel=1e-6)
