"""The e2e example's noise scale as the job measured it against an offline estimate.

The job's estimate is a bias-corrected exponential average (AdaptDL's) of the statistics since
the estimator last started afresh (it does when a run moves from one gradient per step to
several), and the noise scale grows as training proceeds, so the offline estimate averages over
the same stretch with the same weights: given checkpoints of a goodput run taken along the way
(`examples/elastic-training/train.py --base-batch`), it keeps every one the newest estimate
covers (the true gradient's norm swings from one checkpoint to the next, so a subset of them is
a draw of its own), and at each one's weights computes K independent B0-batch gradients
of the same data stream (samples past those trained): with their mean g, var = sum |g_i - g|^2 /
(K - 1) estimates the B0 gradient's variance and |g|^2 - var / K the true gradient's squared
norm. Each checkpoint stands for the samples trained since the previous one, weighted as the
job's average weights them (SMOOTHING per B0 batch trained since); phi = B0 x weighted var /
weighted sqr, printed beside the job's own phi from the newest checkpoint, with the ratio
(target: within 25 %).
Run in the training environment: `python -m benchmarks.goodput_phi B0 K CHECKPOINT...`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from autoscaler.goodput.efficiency import SMOOTHING
from autoscaler.training.adaptation import Adaptation, GoodputSpec
from benchmarks.bench_goodput import example

TOLERANCE = 0.25


def offline_statistics(path: Path, base: int, batches: int) -> tuple[float, float]:
    """(grad_sqr, grad_var of a B0 batch) at a checkpoint's weights."""
    train = example()
    state = torch.load(path, weights_only=True)
    model = train.convnet()
    model.load_state_dict(state["model"])
    grads = []
    first = int(state["samples"])  # data the run had not trained on
    for index in range(batches):
        inputs, labels = train.generated_batch(first + index * base, base)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).double())
    stacked = torch.stack(grads)
    mean = stacked.mean(dim=0)
    var = float(((stacked - mean) ** 2).sum(dim=1).sum() / (batches - 1))
    return float(mean.square().sum()) - var / batches, var


def goodput_state(path: Path) -> dict[str, Any]:
    return dict(torch.load(path, weights_only=True)["extra"]["goodput"])


def job_phi(state: dict[str, Any], base: int) -> float:
    noise = Adaptation(GoodputSpec(base, base, base), state).noise
    assert noise is not None
    return noise.phi


def covered(states: list[dict[str, Any]]) -> int:
    """Index of the first checkpoint the newest estimate covers: after the last one that held a
    one-gradient (differenced) estimate, when the newest holds a several-gradient one."""
    if states[-1]["noise"]["differenced"]:
        return 0
    differenced = [i for i, state in enumerate(states) if state["noise"]["differenced"]]
    return differenced[-1] + 1 if differenced else 0


def weights(samples: list[int], before: int, base: int) -> list[float]:
    """Each checkpoint's share of the job's average: the samples since the one before it, each
    decayed by SMOOTHING per B0 batch trained after it."""
    newest, shares = samples[-1], []
    for previous, current in zip([before, *samples], samples, strict=False):
        shares.append((current - previous) * SMOOTHING ** ((newest - current) / base))
    return shares


def main() -> int:
    base, batches = int(sys.argv[1]), int(sys.argv[2])
    paths = sorted(Path(arg) for arg in sys.argv[3:])
    states = [goodput_state(path) for path in paths]
    first = covered(states)
    before = int(states[first - 1]["samples"]) if first else 0
    samples = [int(state["samples"]) for state in states[first:]]
    statistics = [offline_statistics(path, base, batches) for path in paths[first:]]
    share = weights(samples, before, base)
    sqr = sum(w * s for w, (s, _) in zip(share, statistics, strict=True))
    var = sum(w * v for w, (_, v) in zip(share, statistics, strict=True))
    offline, measured = base * var / sqr, job_phi(states[-1], base)
    ratio = measured / offline
    met = abs(ratio - 1) <= TOLERANCE
    print(
        f"phi at B0={base}: job {measured:.1f}, offline {offline:.1f} "
        f"({batches} batches at each of the {len(samples)} checkpoints the job's estimate covers, "
        f"samples {before:,} to {samples[-1]:,})"
    )
    print(f"  ratio {ratio:.3f} (target within {TOLERANCE:.0%}): {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
