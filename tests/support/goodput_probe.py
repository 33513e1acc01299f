"""Runs `autoscaler.training.goodput.Goodput` on a tiny linear model over loopback gloo, in the
training environment's python, and writes one JSON line per case (named by `case`) for
tests/integration/test_goodput_gradients.py. One process runs every case asked for: the
replicas are forked from it, so torch is imported once (its import is most of a case's time),
and the exact noise scale, the only computation in this process, runs after every fork.

`phi`: with the learning rate 0 the gradient's distribution is fixed, so the smoothed estimate
must approach the exact noise scale, computed from every sample's own gradient.
`accumulation`: after one step at (replicas, local batch, accumulation) the averaged gradient
equals the full batch's gradient computed in one process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from autoscaler.training.adaptation import Config, GoodputSpec
from autoscaler.training.goodput import Goodput

FEATURES = 16
BASE = 8


def data(first: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples `first`.. of a fixed regression dataset (noisy targets: real gradient noise)."""
    generator = torch.Generator().manual_seed(first)
    inputs = torch.randn(size, FEATURES, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True) + torch.randn(size, 1, generator=generator)
    return inputs, targets


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, 1)


def loss_fn(net: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(net(inputs), targets)


def exact_phi(samples: int = 20_000) -> float:
    """tr(per-sample gradient covariance) / |mean gradient|^2 over a large sample."""
    net = model()
    inputs, targets = data(10**7, samples)
    grads = []
    for index in range(samples):
        net.zero_grad()
        loss_fn(net, inputs[index : index + 1], targets[index : index + 1]).backward()
        grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]).double())
    stacked = torch.stack(grads)
    mean = stacked.mean(dim=0)
    return float(((stacked - mean) ** 2).sum(dim=1).mean() / mean.square().sum())


@dataclass(frozen=True)
class Run:
    store: str
    case: str
    check: str
    config: Config
    out: str


def worker(rank: int, job: Run) -> None:
    store, check, config, out = job.store, job.check, job.config, job.out
    world = config.replicas
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    net = model()
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    lr = 0.0 if check == "phi" else 0.1
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    spec = GoodputSpec(base_batch=BASE, max_local_batch=64, max_global_batch=1024)
    goodput = Goodput(ddp, optimizer, spec, adapt=False)
    goodput.config = config
    steps = 400 if check == "phi" else 1
    for _ in range(steps):
        for micro in goodput.micro_batches():
            inputs, targets = data(goodput.first_sample(micro, rank), goodput.local_batch)
            loss_fn(ddp, inputs, targets).backward()
        if check == "accumulation":
            grads = torch.cat([p.grad.flatten() for p in net.parameters()])
        goodput.step()
    if rank == 0:
        result: dict[str, object] = {"case": job.case, "check": check, **config.__dict__}
        if check == "phi":
            noise = goodput.adaptation.noise
            result["phi"] = None if noise is None else noise.phi
        else:
            reference = model()
            local = config.local_batch  # the job's samples in order, slice by slice
            slices = [data(first, local) for first in range(0, config.global_batch, local)]
            inputs, targets = (torch.cat(parts) for parts in zip(*slices, strict=True))
            loss_fn(reference, inputs, targets).backward()
            expected = torch.cat([p.grad.flatten() for p in reference.parameters()])
            result["max_error"] = float((grads - expected).abs().max())
            result["lr"] = optimizer.param_groups[0]["lr"]
            result["lr_factor"] = goodput.adaptation.lr_factor(config.global_batch)
        with open(out, "a") as stream:
            stream.write(json.dumps(result) + "\n")
    dist.barrier()  # a rank that tears gloo down while its peer still works aborts the peer
    dist.destroy_process_group()


def run(case: str, out: str) -> None:
    check, config = CASES[case]
    with tempfile.TemporaryDirectory() as directory:
        job = Run(os.path.join(directory, "store"), case, check, config, out)
        mp.start_processes(worker, args=(job,), nprocs=config.replicas, start_method="fork")


CASES = {
    "phi-2x4": ("phi", Config(2, BASE // 2, 0)),
    "phi-1x8": ("phi", Config(1, BASE, 0)),
    "phi-2x8x2": ("phi", Config(2, BASE, 1)),
    "accumulation-2x4x3": ("accumulation", Config(2, 4, 2)),
    "accumulation-1x8x2": ("accumulation", Config(1, 8, 1)),
}


def main() -> None:
    out, names = sys.argv[1], sys.argv[2:] or [*CASES, "exact"]
    for name in (name for name in names if name != "exact"):
        run(name, out)
    if "exact" in names:  # after the forks: this process computes nothing before them
        with open(out, "a") as stream:
            stream.write(json.dumps({"case": "exact", "phi": exact_phi()}) + "\n")


if __name__ == "__main__":
    main()
