"""A training script that imports only torch: the plain torchrun pattern a user already has.

Nothing here knows about Kubernetes or this project. What makes it survive a rescale is what
PyTorch's own elastic tutorial asks of any torchrun script:
- it reads its rank and world size from the environment torchrun sets (`init_process_group`
  with no arguments), so a world re-formed at another size just works;
- it saves a snapshot every `--save-every` epochs (model, optimizer, epochs run) and loads it
  on start: torchrun restarts every worker on a membership change, and a restarted worker
  resumes from the snapshot, losing at most the epochs since it;
- a `DistributedSampler` splits each epoch's data by the current world size.

It prints one line per epoch and one per resume, which is all a test (or a user) needs to see
what a rescale cost. The data is generated (a regression on random features) and real CPU work.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--save-every", type=int, default=2, help="epochs between snapshots")
    parser.add_argument("--snapshot", type=Path, required=True, help="on storage every pod sees")
    parser.add_argument("--samples", type=int, default=8192, help="per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    return parser.parse_args()


def dataset(samples: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(samples, 256, generator=generator)
    weights = torch.randn(256, 1, generator=generator)
    return TensorDataset(features, features @ weights)


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    optim = torch.optim.SGD(model.parameters(), lr=1e-3)
    epochs_run = 0
    if args.snapshot.exists():
        snapshot = torch.load(args.snapshot, weights_only=True)
        model.load_state_dict(snapshot["model"])
        optim.load_state_dict(snapshot["optim"])
        epochs_run = snapshot["epochs_run"]
        print(f"rank {rank}: resuming from the snapshot at epoch {epochs_run}", flush=True)
    ddp = DistributedDataParallel(model)
    data = dataset(args.samples)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    for epoch in range(epochs_run, args.epochs):
        sampler.set_epoch(epoch)
        for features, target in loader:
            loss = torch.nn.functional.mse_loss(ddp(features), target)
            optim.zero_grad()
            loss.backward()
            optim.step()
        print(
            f"rank {rank}: epoch {epoch} done, world {dist.get_world_size()}, "
            f"loss {loss.item():.3f}",
            flush=True,
        )
        if rank == 0 and (epoch + 1) % args.save_every == 0:
            tmp = args.snapshot.with_suffix(f".{os.getpid()}.tmp")
            state = {"model": model.state_dict(), "optim": optim.state_dict()}
            torch.save({**state, "epochs_run": epoch + 1}, tmp)
            tmp.replace(args.snapshot)  # atomic: a worker killed mid-save leaves no torn file
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
