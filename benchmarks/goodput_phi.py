"""The e2e example's noise scale as the job measured it against an offline estimate.

Given a goodput run's checkpoint directory (`examples/elastic-training/train.py --base-batch`),
takes the checkpoint's model and computes K independent B0-batch gradients of the same data
stream (samples past the ones trained) at those weights: with their mean g and spread,
var = sum |g_i - g|^2 / (K - 1) estimates the B0 gradient's variance, |g|^2 - var / K the true
gradient's squared norm, and phi = B0 var / sqr. Prints it beside the job's smoothed phi from
the same checkpoint and the ratio (target: within 25 %). Run in the training environment:
`python -m benchmarks.goodput_phi CHECKPOINT_DIR B0 [K]`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from autoscaler.training.adaptation import Adaptation, GoodputSpec
from benchmarks.bench_goodput import example

TOLERANCE = 0.25


def offline_phi(directory: Path, base: int, batches: int) -> tuple[float, float]:
    """(offline phi, the job's phi) at the checkpoint's weights, both at B0 = `base`."""
    train = example()
    state = torch.load(directory / train.CHECKPOINT, weights_only=True)
    goodput = state["extra"]["goodput"]
    model = train.convnet()
    model.load_state_dict(state["model"])
    spec = GoodputSpec(base, base, base)
    measured = Adaptation(spec, goodput).noise
    assert measured is not None
    grads = []
    first = int(state["samples"])  # data the run did not train on
    for index in range(batches):
        inputs, labels = train.generated_batch(first + index * base, base)
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).double())
    stacked = torch.stack(grads)
    mean = stacked.mean(dim=0)
    var = float(((stacked - mean) ** 2).sum(dim=1).sum() / (batches - 1))
    sqr = float(mean.square().sum()) - var / batches
    return base * var / sqr, measured.phi


def main() -> int:
    directory, base = Path(sys.argv[1]), int(sys.argv[2])
    batches = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    offline, measured = offline_phi(directory, base, batches)
    ratio = measured / offline
    met = abs(ratio - 1) <= TOLERANCE
    print(f"phi at B0={base}: job {measured:.1f}, offline {offline:.1f} from {batches} batches")
    print(f"  ratio {ratio:.3f} (target within {TOLERANCE:.0%}): {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
