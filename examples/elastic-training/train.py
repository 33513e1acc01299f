"""A small, real elastic training script: DDP over gloo, run by `torchrun` from the PET_* env.

What an elastic job's script must do, in about a hundred lines:
- resume on every incarnation from the newest checkpoint (torchrun restarts every worker on each
  membership change, so a rescale is a restart of the whole world at its new size);
- checkpoint every few steps with an atomic rename (a worker killed mid-write never leaves a torn
  file behind: `os.replace` is atomic on POSIX);
- shard the data by the current WORLD_SIZE, and keep the global batch per step proportional to it;
- bound the collective timeout, so a peer that vanishes without closing its sockets (a lost
  node) fails the step in `--collective-timeout` seconds instead of gloo's default 30 minutes;
- report its throughput with `autoscaler.training.ThroughputReporter` (one reporter per pod).

The model is tiny; `--step-seconds` stands in for the accelerator's compute time per step (a GPU
step runs on the device, not on the host's CPU), so the job's throughput grows with its workers
the way a data-parallel job's does. With `--events FILE` every process appends JSON lines
(start, resume, step, checkpoint, done) that tests measure stalls and redone steps from.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from autoscaler.training import ThroughputReporter

CHECKPOINT = "checkpoint.pt"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--total-steps", type=int, default=1000)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    parser.add_argument("--step-seconds", type=float, default=0.1, help="emulated device time")
    parser.add_argument("--collective-timeout", type=float, default=30.0)
    parser.add_argument("--metrics-port", type=int, default=9400)
    parser.add_argument("--events", type=Path, default=None)
    parser.add_argument(
        "--finish-file", type=Path, default=None, help="when it exists, finish at the next step"
    )
    return parser.parse_args()


class Events:
    """JSON lines appended to a shared file (one `write` per line: O_APPEND keeps lines whole)."""

    def __init__(self, path: Path | None, **identity: object) -> None:
        self.path, self.identity = path, identity

    def __call__(self, event: str, **fields: object) -> None:
        if self.path is not None:
            line = json.dumps({"event": event, "time": time.time(), **self.identity, **fields})
            with self.path.open("a") as out:
                out.write(line + "\n")


def load_checkpoint(directory: Path, model: torch.nn.Module, optim: torch.optim.Optimizer) -> int:
    """The step to continue from: the checkpoint's, or 0 when there is none."""
    path = directory / CHECKPOINT
    if not path.exists():
        return 0
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])
    return int(state["step"])


def save_checkpoint(
    directory: Path, model: torch.nn.Module, optim: torch.optim.Optimizer, step: int
) -> None:
    tmp = directory / f".{CHECKPOINT}.{os.getpid()}.tmp"
    torch.save({"model": model.state_dict(), "optim": optim.state_dict(), "step": step}, tmp)
    os.replace(tmp, directory / CHECKPOINT)


def finish_requested(path: Path | None) -> bool:
    """Whether any rank sees the finish file (agreed by all ranks, so they stop at one step)."""
    if path is None:
        return False
    seen = torch.tensor([1.0 if path.exists() else 0.0])
    dist.all_reduce(seen, op=dist.ReduceOp.MAX)
    return bool(seen.item())


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.collective_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    events = Events(args.events, host=socket.gethostname(), pid=os.getpid(), rank=rank, world=world)
    events("start", restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    reporter = None
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        reporter = ThroughputReporter.start(port=args.metrics_port)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    step = resumed = load_checkpoint(args.checkpoint_dir, model, optim)
    events("resume", from_step=step)
    ddp = DistributedDataParallel(model)

    while step < args.total_steps and not finish_requested(args.finish_file):
        generator = torch.Generator().manual_seed(step * 100_003 + rank)  # this rank's shard
        inputs = torch.randn(args.batch_size, 16, generator=generator)
        target = inputs.sum(dim=1, keepdim=True)
        time.sleep(args.step_seconds)  # the accelerator's share of the step
        loss = torch.nn.functional.mse_loss(ddp(inputs), target)
        optim.zero_grad()
        loss.backward()  # all-reduces the gradients across the world
        optim.step()
        step += 1
        if reporter is not None:
            reporter.step(samples=args.batch_size * local_world)
        events("step", step=step, loss=round(loss.item(), 4))
        if rank == 0 and step % args.checkpoint_every == 0:
            save_checkpoint(args.checkpoint_dir, model, optim, step)
            events("checkpoint", step=step)

    # Only what this incarnation trained: a world re-formed after the last save (a scale-up
    # during the final barrier) resumes at the end and has nothing new to save.
    if rank == 0 and step > resumed and step % args.checkpoint_every != 0:
        save_checkpoint(args.checkpoint_dir, model, optim, step)
        events("checkpoint", step=step)
    dist.barrier()  # nobody leaves before rank 0's last checkpoint is written
    events("done", step=step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
