"""A small, real elastic training script: DDP over gloo, run by `torchrun` from the PET_* env.

What an elastic job's script must do, in about a hundred lines:
- resume on every incarnation from the newest checkpoint (torchrun restarts every worker on each
  membership change, so a rescale is a restart of the whole world at its new size);
- checkpoint every few steps with an atomic rename (a worker killed mid-write never leaves a torn
  file behind: `os.replace` is atomic on POSIX);
- shard the data by the current WORLD_SIZE, and keep the global batch per step proportional to it;
- bound the collective timeout, so a peer that vanishes without closing its sockets (a lost
  node) fails the step in `--collective-timeout` seconds instead of gloo's default 30 minutes;
- report its throughput and its declared work with `autoscaler.training.ThroughputReporter`
  (one reporter per pod), so the engine sizes it by the samples it has left.

It trains a small convolutional net on generated 32x32 images, real CPU compute: with one
intra-op thread (`OMP_NUM_THREADS=1`) a step of 128 images takes about 0.1 s on one core. It ends
when the job has trained `--total-samples` samples (every worker's, every incarnation's), or the
number in `--work-file` once one is written there (the job's work changed while it runs). With
`--events FILE` every process appends JSON lines (start, resume, step, checkpoint, done) that
tests measure stalls and redone steps from.

Goodput (opt-in): with `--base-batch B0 --max-local-batch M --max-global-batch G` the script hands
its steps to `autoscaler.training.goodput.Goodput`, which measures the gradient noise, picks the
local batch and accumulation steps for the world it has, scales the learning rate by
`--lr-rule`, and counts `--total-samples` in samples at B0 (`--batch-size` is then unused).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from autoscaler.training import ThroughputReporter
from autoscaler.training.adaptation import GoodputSpec
from autoscaler.training.goodput import Goodput
from autoscaler.training.work import DeclaredWork

CHECKPOINT = "checkpoint.pt"
CLASSES = 4  # the brightest of an image's four quadrants
COLLECTIVE_TIMEOUT = 15.0  # over 2x the longest wait a collective had in `make e2e`: ~6 s
LEARNING_RATE = 0.01  # per worker's batch
# PIDs repeat across containers (each is a PID namespace of its own): a process's own identity.
PROCESS = uuid.uuid4().hex


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--total-samples", type=int, default=200_000, help="the job's work")
    parser.add_argument(
        "--work-file", type=Path, default=None, help="a number written here replaces the work"
    )
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps")
    parser.add_argument("--batch-size", type=int, default=128, help="samples per worker per step")
    parser.add_argument("--collective-timeout", type=float, default=COLLECTIVE_TIMEOUT)
    parser.add_argument("--metrics-port", type=int, default=9400)
    parser.add_argument("--events", type=Path, default=None)
    parser.add_argument("--base-batch", type=int, default=None, help="goodput: B0 (opt-in)")
    parser.add_argument("--max-local-batch", type=int, default=512, help="goodput: per worker")
    parser.add_argument("--max-global-batch", type=int, default=4096, help="goodput: per step")
    parser.add_argument("--lr-rule", choices=["adascale", "sqrt", "linear"], default="adascale")
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


def convnet() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 8 * 8, CLASSES),
    )


def generated_batch(first_sample: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples `first_sample`.. of a generated dataset: noise images, labelled by which of the
    image's quadrants is brightest (something a convolutional net can learn)."""
    generator = torch.Generator().manual_seed(first_sample)
    images = torch.randn(size, 3, 32, 32, generator=generator)
    quadrants = images.mean(dim=1).unfold(1, 16, 16).unfold(2, 16, 16).mean(dim=(3, 4))
    return images, quadrants.flatten(1).argmax(dim=1)


def load_checkpoint(
    directory: Path, model: torch.nn.Module, optim: torch.optim.Optimizer
) -> dict[str, Any]:
    """The step, the job's samples trained and the goodput state to continue from."""
    path = directory / CHECKPOINT
    if not path.exists():
        return {"step": 0, "samples": 0, "goodput": None}
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])
    extra = state.get("extra", {"goodput": None})  # written before goodput: none
    return {"step": int(state["step"]), "samples": int(state["samples"]), **extra}


def save_checkpoint(
    directory: Path, model: torch.nn.Module, optim: torch.optim.Optimizer, **position: Any
) -> None:
    """`position`: the step, the job's samples and the goodput state (None without)."""
    tmp = directory / f".{CHECKPOINT}.{PROCESS}.tmp"
    state = {"model": model.state_dict(), "optim": optim.state_dict()}
    goodput = position.pop("goodput")
    extra = {"goodput": None if goodput is None else goodput.state_dict()}
    torch.save({**state, **position, "extra": extra}, tmp)
    os.replace(tmp, directory / CHECKPOINT)


def plain_step(
    ddp: DistributedDataParallel, optim: torch.optim.Optimizer, first: int, size: int
) -> torch.Tensor:
    inputs, labels = generated_batch(first, size)
    loss = torch.nn.functional.cross_entropy(ddp(inputs), labels)
    optim.zero_grad()
    loss.backward()  # all-reduces the gradients across the world
    optim.step()
    return loss


def with_goodput(
    args: argparse.Namespace,
    ddp: DistributedDataParallel,
    optim: torch.optim.Optimizer,
    reporter: ThroughputReporter | None,
    state: dict[str, Any] | None,
) -> Goodput:
    """The opt-in: the base batch's learning rate, which Goodput scales at every step."""
    for group in optim.param_groups:
        group["lr"] = LEARNING_RATE * args.base_batch / args.batch_size
    spec = GoodputSpec(args.base_batch, args.max_local_batch, args.max_global_batch, args.lr_rule)
    return Goodput(ddp, optim, spec, reporter=reporter, state=state)


def goodput_step(
    goodput: Goodput, ddp: DistributedDataParallel, rank: int
) -> tuple[torch.Tensor, dict[str, object]]:
    """One step at the batch Goodput chose; its last loss and what the step event records."""
    taken = goodput.config  # the step may choose the next step's batch: record this one's
    for micro in goodput.micro_batches():
        inputs, labels = generated_batch(goodput.first_sample(micro, rank), goodput.local_batch)
        loss = torch.nn.functional.cross_entropy(ddp(inputs), labels)
        loss.backward()  # all-reduced in the last micro-step only
    goodput.step()  # measures, sets the learning rate, steps, reports
    noise = goodput.adaptation.noise
    return loss, {
        "progress": goodput.progress,
        "global_batch": taken.global_batch,
        "local_batch": taken.local_batch,
        "accum_steps": taken.accum_steps,
        "lr": goodput.optimizer.param_groups[0]["lr"],
        "phi": None if noise is None else noise.phi,
    }


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.collective_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    events = Events(args.events, host=socket.gethostname(), process=PROCESS, rank=rank, world=world)
    events("start", restart=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    reporter = None
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        reporter = ThroughputReporter.start(
            port=args.metrics_port, total_samples=args.total_samples
        )
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    work = DeclaredWork(
        args.total_samples,
        path=args.work_file,
        on_change=None if reporter is None else reporter.set_total,
    )

    torch.manual_seed(0)
    model = convnet()
    optim = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    state = load_checkpoint(args.checkpoint_dir, model, optim)
    step, samples = state["step"], state["samples"]
    for group in optim.param_groups:  # linear scaling: the global batch is world x batch
        group["lr"] = LEARNING_RATE * world
    resumed = step
    ddp = DistributedDataParallel(model)
    goodput = None
    if args.base_batch is not None:
        goodput = with_goodput(args, ddp, optim, reporter, state["goodput"])
        samples = goodput.samples
    events("resume", from_step=step, samples=samples)
    if reporter is not None:
        reporter.set_progress(samples if goodput is None else goodput.progress)

    def trained() -> bool:
        if goodput is None:
            return samples >= work.total()
        return goodput.done(work.total())  # in samples at B0

    while not trained():
        if goodput is None:
            # This rank's shard of the global batch: the job's samples are trained in order.
            loss = plain_step(ddp, optim, samples + rank * args.batch_size, args.batch_size)
            samples += args.batch_size * world
            if reporter is not None:
                reporter.step(samples=args.batch_size * local_world)
                reporter.set_progress(samples)
            fields: dict[str, object] = {}
        else:
            loss, fields = goodput_step(goodput, ddp, rank)
            samples = goodput.samples
        step += 1
        events("step", step=step, samples=samples, loss=round(loss.item(), 4), **fields)
        if rank == 0 and step % args.checkpoint_every == 0:
            save_checkpoint(
                args.checkpoint_dir, model, optim, step=step, samples=samples, goodput=goodput
            )
            events("checkpoint", step=step)

    # Only what this incarnation trained: a world re-formed after the last save (a scale-up
    # during the final barrier) resumes at the end and has nothing new to save.
    if rank == 0 and step > resumed and step % args.checkpoint_every != 0:
        save_checkpoint(
            args.checkpoint_dir, model, optim, step=step, samples=samples, goodput=goodput
        )
        events("checkpoint", step=step)
    dist.barrier()  # nobody leaves before rank 0's last checkpoint is written
    events("done", step=step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
