"""The goodput helper's measurements with real torch on loopback gloo (tiny linear model):
the smoothed noise scale approaches the exact one from per-sample gradients, at one replica
(differenced) and at two (with and without accumulation), and accumulation averages exactly the
full batch's gradient, the learning rate set by its rule."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.controlplane import REPO_ROOT

pytestmark = pytest.mark.timeout(300)
PROBE = REPO_ROOT / "tests" / "support" / "goodput_probe.py"


def probe(torch_env: Path, out: Path, case: str) -> dict[str, float]:
    env = {"PATH": f"{torch_env / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run(
        ["python", str(PROBE), str(out), case], env=env, check=True, timeout=240, cwd=REPO_ROOT
    )
    result: dict[str, float] = json.loads(out.read_text().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def exact_phi(torch_env: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    return probe(torch_env, tmp_path_factory.mktemp("exact") / "out.jsonl", "exact")["phi"]


@pytest.mark.parametrize("case", ["phi-2x4", "phi-1x8", "phi-2x8x2"])
def test_the_noise_scale_matches_the_exact_one(
    torch_env: Path, tmp_path: Path, exact_phi: float, case: str
) -> None:
    measured = probe(torch_env, tmp_path / "out.jsonl", case)["phi"]
    assert measured == pytest.approx(exact_phi, rel=0.2)


@pytest.mark.parametrize("case", ["accumulation-2x4x3", "accumulation-1x8x2"])
def test_accumulation_averages_the_full_batch(torch_env: Path, tmp_path: Path, case: str) -> None:
    result = probe(torch_env, tmp_path / "out.jsonl", case)
    assert result["max_error"] < 1e-5
    assert result["lr"] == pytest.approx(0.1 * result["lr_factor"])
