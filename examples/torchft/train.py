"""The elastic example in torchft mode: workers join and leave while the others keep training.

Against the torchrun example (`examples/elastic-training/train.py`) a script changes three things:
- `FaultTolerantTraining.from_pod(model, optimizer, ...)` instead of `init_process_group` and
  DDP: each pod is one replica group, run directly (`python train.py`, no torchrun);
- the loop is `for step in training.steps(...)`, training the samples `step` names: a step
  either commits on every participating group or on none, so each sample is trained once;
- no resume logic: a joining pod receives the live state from a peer (the checkpoint, written by
  one group, is only for a restart of the whole job).

Same model, data and reporting as the torchrun example: a small conv net on generated 32x32
images, real CPU compute (about 0.1 s a step of 128 images on one core), throughput and progress
through `autoscaler.training.ThroughputReporter`. It ends when the job has trained
`--total-samples`, or the number in `--work-file` once one is written there. With `--events FILE`
every process appends JSON lines: `start`, `commit` (every step: its number, participants,
whether it committed, a hash of the parameters every `--hash-every` steps), `stop`, `done`.

Goodput (opt-in): `--base-batch B0 --max-local-batch M --max-global-batch G` let the helper
choose the batch at every quorum change and count `--total-samples` in samples at B0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import sys
import time
import uuid
from pathlib import Path

import torch

from autoscaler.training import ThroughputReporter
from autoscaler.training.adaptation import GoodputSpec
from autoscaler.training.batches import Step
from autoscaler.training.fault_tolerant import STOPPED_BY_SIGNAL, FaultTolerantTraining
from autoscaler.training.work import DeclaredWork

CLASSES = 4  # the brightest of an image's four quadrants
LEARNING_RATE = 0.01  # per group's batch (scaled by the participants)
PROCESS = uuid.uuid4().hex  # PIDs repeat across containers


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=None, help="file shared by the pods")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps")
    parser.add_argument("--total-samples", type=int, default=200_000, help="the job's work")
    parser.add_argument(
        "--work-file", type=Path, default=None, help="a number written here replaces the work"
    )
    parser.add_argument("--batch-size", type=int, default=128, help="samples per group per step")
    parser.add_argument(
        "--batch",
        choices=["per-group", "global"],
        default="per-group",
        help="per-group: each group trains --batch-size (the learning rate scaled by the groups);"
        " global: --batch-size split across the groups (the learning rate kept)",
    )
    parser.add_argument("--metrics-port", type=int, default=9400)
    parser.add_argument("--events", type=Path, default=None)
    parser.add_argument("--hash-every", type=int, default=10, help="steps")
    parser.add_argument("--base-batch", type=int, default=None, help="goodput: B0 (opt-in)")
    parser.add_argument("--max-local-batch", type=int, default=512, help="goodput: per group")
    parser.add_argument("--max-global-batch", type=int, default=4096, help="goodput: per step")
    parser.add_argument("--lr-rule", choices=["adascale", "sqrt", "linear"], default="adascale")
    return parser.parse_args()


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
    """Samples `first_sample`.. of a generated dataset, labelled by the brightest quadrant."""
    generator = torch.Generator().manual_seed(first_sample)
    images = torch.randn(size, 3, 32, 32, generator=generator)
    quadrants = images.mean(dim=1).unfold(1, 16, 16).unfold(2, 16, 16).mean(dim=(3, 4))
    return images, quadrants.flatten(1).argmax(dim=1)


def parameters_hash(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().numpy().tobytes())
    return digest.hexdigest()[:16]


class Events:
    """JSON lines appended to a shared file (one `write` per line: O_APPEND keeps lines whole)."""

    def __init__(self, path: Path | None, **identity: object) -> None:
        self.path, self.identity = path, identity

    def __call__(self, event: str, **fields: object) -> None:
        if self.path is not None:
            line = json.dumps({"event": event, "time": time.time(), **self.identity, **fields})
            with self.path.open("a") as out:
                out.write(line + "\n")


def main() -> int:
    args = parse_args()
    events = Events(args.events, host=socket.gethostname(), process=PROCESS)
    events("start")
    reporter = ThroughputReporter.start(port=args.metrics_port, total_samples=args.total_samples)
    work = DeclaredWork(args.total_samples, path=args.work_file, on_change=reporter.set_total)
    torch.manual_seed(0)  # every group starts from the same weights
    model = convnet()
    goodput = None
    if args.base_batch is not None:  # the opt-in: the learning rate given is the base batch's
        goodput = GoodputSpec(
            args.base_batch, args.max_local_batch, args.max_global_batch, args.lr_rule
        )
    lr = LEARNING_RATE if goodput is None else LEARNING_RATE * args.base_batch / args.batch_size
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    training = FaultTolerantTraining.from_pod(
        model,
        optimizer,
        batch_size=args.batch_size,
        batch=args.batch,
        checkpoint=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        goodput=goodput,
    )
    training.stop_on_sigterm()

    def committed(step: Step, ok: bool) -> None:
        samples = training.samples_done()
        fields: dict[str, object] = {"step": step.number, "participants": step.participants}
        if training.adaptation is None:
            if ok and step.participating:
                reporter.step(samples=step.size)
            reporter.set_progress(samples)
        else:  # goodput: progress in samples at B0, the step's micro-batches
            config = training.config
            assert config is not None
            if ok and step.participating:
                reporter.step(samples=step.size * config.micro_steps)
            reporter.set_progress(training.adaptation.progress)
            reporter.set_goodput(training.adaptation.report(config))
            noise = training.adaptation.noise
            fields |= {
                "progress": training.adaptation.progress,
                "global_batch": config.global_batch,
                "lr": optimizer.param_groups[0]["lr"],
                "phi": None if noise is None else noise.phi,
            }
        if ok and (step.number + 1) % args.hash_every == 0:
            fields["hash"] = parameters_hash(model)
        events("commit", ok=ok, healing=not step.participating, samples=samples, **fields)

    for step in training.steps(total_samples=work.total, on_commit=committed):
        inputs, labels = generated_batch(step.first_sample, step.size)
        torch.nn.functional.cross_entropy(training.model(inputs), labels).backward()

    training.close()
    if training.stopping:
        events("stop", step=training.manager.current_step())
        return STOPPED_BY_SIGNAL
    events("done", step=training.manager.current_step(), hash=parameters_hash(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
