"""The e2e example's noise scale as the job measured it against an offline estimate.

The job's estimate is a smoothed average over its training (AdaptDL's bias-corrected
exponential average), and the noise scale grows as training proceeds, so the offline estimate
averages over the same stretch: given checkpoints of a goodput run taken along the way
(`examples/elastic-training/train.py --base-batch`), at each one's weights it computes K
independent B0-batch gradients of the same data stream (samples past those trained): with their
mean g, var = sum |g_i - g|^2 / (K - 1) estimates the B0 gradient's variance and |g|^2 - var / K
the true gradient's squared norm. phi = B0 x mean var / mean sqr over the checkpoints, printed
beside the job's own phi from the newest checkpoint, with the ratio (target: within 25 %).
Run in the training environment: `python -m benchmarks.goodput_phi B0 K CHECKPOINT...`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

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


def job_phi(path: Path, base: int) -> float:
    goodput = torch.load(path, weights_only=True)["extra"]["goodput"]
    noise = Adaptation(GoodputSpec(base, base, base), goodput).noise
    assert noise is not None
    return noise.phi


def main() -> int:
    base, batches = int(sys.argv[1]), int(sys.argv[2])
    paths = sorted(Path(arg) for arg in sys.argv[3:])
    statistics = [offline_statistics(path, base, batches) for path in paths]
    sqr = sum(s for s, _ in statistics) / len(statistics)
    var = sum(v for _, v in statistics) / len(statistics)
    offline, measured = base * var / sqr, job_phi(paths[-1], base)
    ratio = measured / offline
    met = abs(ratio - 1) <= TOLERANCE
    print(
        f"phi at B0={base}: job {measured:.1f}, offline {offline:.1f} "
        f"({batches} batches at each of {len(paths)} checkpoints)"
    )
    print(f"  ratio {ratio:.3f} (target within {TOLERANCE:.0%}): {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
