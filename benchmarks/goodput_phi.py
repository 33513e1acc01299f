"""The e2e example's noise scale as the job measured it against an offline estimate.

The job's estimate is a bias-corrected exponential average (AdaptDL's) of each step's
statistics since the estimator last started afresh (it does when a run moves from one gradient
per step to several). Given checkpoints of a goodput run taken along the way
(`examples/elastic-training/train.py --base-batch`), the offline estimate covers the stretch
between the first and the newest checkpoint that estimate covers, with the job's data and
weights: the samples the job trained after each checkpoint, up to the next, split into B0
batches, each batch's gradient computed afresh at that checkpoint's weights. With their mean g
over K batches, var = sum |g_i - g|^2 / (K - 1) estimates a B0 batch's gradient variance and
|g|^2 - var / K the true gradient's squared norm; each stretch is weighted as the job's average
weights its samples (SMOOTHING per B0 batch trained after them). The job's own phi over the same
stretch comes from its average at the first and at the newest checkpoint (each step decays the
average by SMOOTHING per B0 batch, so the first, decayed, comes off the newest). Printed with
the ratio (target: within 25 %).

Both sides see the same samples because the squared norm of a gradient that noise dominates is
hard to estimate: over the e2e run's ~75,000 samples, sampling alone puts about 10 % (one
standard deviation) on it, so two samplings of the data would differ by more.
Run in the training environment: `python -m benchmarks.goodput_phi B0 CHECKPOINT...`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from autoscaler.goodput.efficiency import SMOOTHING, noise_scale
from benchmarks.bench_goodput import example

TOLERANCE = 0.25


def offline_statistics(path: Path, base: int, batches: int) -> tuple[float, float]:
    """(grad_sqr, grad_var of a B0 batch) at a checkpoint's weights, over the `batches` B0
    batches the job trained next."""
    train = example()
    state = torch.load(path, weights_only=True)
    model = train.convnet()
    model.load_state_dict(state["model"])
    grads = []
    first = int(state["samples"])  # the job's next sample
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


def covered(states: list[dict[str, Any]]) -> int:
    """Index of the first checkpoint the newest estimate covers: after the last one that held a
    one-gradient (differenced) estimate, when the newest holds a several-gradient one."""
    if states[-1]["noise"]["differenced"]:
        return 0
    differenced = [i for i, state in enumerate(states) if state["noise"]["differenced"]]
    return differenced[-1] + 1 if differenced else 0


def job_phi_between(first: dict[str, Any], newest: dict[str, Any], base: int) -> float:
    """The job's phi over the samples it trained between two checkpoints of one estimate (the
    averages' weights are the same for both statistics, so they cancel)."""
    decay = SMOOTHING ** ((int(newest["samples"]) - int(first["samples"])) / base)
    old, new = first["noise"], newest["noise"]
    sqr = new["sqr_biased"] - decay * old["sqr_biased"]
    var = new["var_biased"] - decay * old["var_biased"]
    return noise_scale(sqr, var, base)


def main() -> int:
    base = int(sys.argv[1])
    paths = sorted(Path(arg) for arg in sys.argv[2:])
    states = [goodput_state(path) for path in paths]
    start = covered(states)
    paths, states = paths[start:], states[start:]
    samples = [int(state["samples"]) for state in states]
    sqr = var = 0.0
    gradients = 0
    for path, begin, end in zip(paths, samples, samples[1:], strict=False):
        if end == begin:  # the same checkpoint copied twice
            continue
        batches = max(round((end - begin) / base), 2)
        share = (end - begin) * SMOOTHING ** ((samples[-1] - end) / base)
        grad_sqr, grad_var = offline_statistics(path, base, batches)
        sqr, var, gradients = sqr + share * grad_sqr, var + share * grad_var, gradients + batches
    offline = noise_scale(sqr, var, base)
    measured = job_phi_between(states[0], states[-1], base)
    ratio = measured / offline
    met = abs(ratio - 1) <= TOLERANCE
    print(
        f"phi at B0={base} over samples {samples[0]:,} to {samples[-1]:,} ({len(paths)} "
        f"checkpoints, {gradients} B0-batch gradients): job {measured:.1f}, offline {offline:.1f}"
    )
    print(f"  ratio {ratio:.3f} (target within {TOLERANCE:.0%}): {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
