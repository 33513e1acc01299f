"""Goodput for a torchrun DDP script: gradient statistics measured, batch and learning rate chosen.

    goodput = Goodput(ddp, optimizer, spec, reporter=reporter, state=checkpoint.get("goodput"))
    while not goodput.done(total_samples_at_b0):
        for micro in goodput.micro_batches():  # accumulation: DDP syncs only in the last one
            inputs, labels = my_batch(goodput.first_sample(micro, rank), goodput.local_batch)
            loss_fn(ddp(inputs), labels).backward()
        goodput.step()  # measures, sets the learning rate, steps, counts
    checkpoint["goodput"] = goodput.state_dict()

A single worker measures its gradient noise from its micro-batches: a step without
accumulation runs as two half micro-batches (same samples, same global batch, its configuration
and step times still those of one micro-step), since consecutive steps' gradients, the only
other pair it has, differ by the step taken between them.

The batch is chosen when the world forms (torchrun restarts every worker on a membership
change) and again every `rechoose_every` steps as the noise grows: rank 0 picks the local batch
and accumulation steps that maximise goodput for the world's size under the step-time model
fitted over the job's own observations (kept in `state_dict`) and broadcasts them. With
`adapt=False` the batch stays `spec.base_batch / world` per replica and only the statistics are
measured and reported. The comm hook averages the gradients over replicas and accumulation
steps, so a script does not divide its loss by the accumulation steps. The optimizer's learning
rates are taken as the base batch's (kept in `state_dict`, so a restart does not scale scaled
rates); each step sets them to base x the declared rule's factor.
"""

# DDP checks the comm hook's annotations at run time: no `from __future__ import annotations`.
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from autoscaler.training import ThroughputReporter
from autoscaler.training.adaptation import (
    RECHOOSE_EVERY,
    Adaptation,
    Config,
    GoodputSpec,
    in_halves,
)
from autoscaler.training.gradient_norms import GradientNorms, MicroBatchNorms
from autoscaler.training.teardown import collect_garbage_at_exit


class Goodput:
    """One worker's view of a goodput job trained with torch's DistributedDataParallel."""

    def __init__(
        self,
        ddp: torch.nn.parallel.DistributedDataParallel,
        optimizer: torch.optim.Optimizer,
        spec: GoodputSpec,
        *,
        reporter: ThroughputReporter | None = None,
        state: dict[str, Any] | None = None,
        adapt: bool = True,
        measure: bool = True,
        rechoose_every: int = RECHOOSE_EVERY,
    ) -> None:
        self.ddp, self.optimizer, self.reporter = ddp, optimizer, reporter
        self.adaptation = Adaptation(spec, state)
        self.world, self.rank = int(dist.get_world_size()), int(dist.get_rank())
        saved = (state or {}).get("base_lrs")  # a loaded optimizer carries the scaled rates
        self._base_lrs = saved or [group["lr"] for group in optimizer.param_groups]
        self.adapt, self.rechoose_every = adapt, rechoose_every
        self._steps = 0
        if adapt:
            self.config = self._choose(None)
        else:
            self.config = Config(self.world, max(spec.base_batch // self.world, 1), 0)
        self.norms = GradientNorms(self._mean) if measure else None
        if self.norms is not None:
            self.norms.start(self.world)
        self.pieces = MicroBatchNorms(list(ddp.module.parameters())) if measure else None
        ddp.register_comm_hook(None, self._hook)
        collect_garbage_at_exit()  # the hook and `self.ddp` are a cycle
        self._last_step: float | None = None  # the first step of an incarnation is not timed

    @property
    def running(self) -> Config:
        """How a step at `config` runs: as chosen, but a single worker's step without
        accumulation as two half micro-batches when it measures its noise."""
        return self.config if self.pieces is None else in_halves(self.config)

    @property
    def by_micro_batch(self) -> bool:
        """Whether this step's noise is measured from its micro-batches (one worker)."""
        return self.pieces is not None and self.world == 1 and self.micro_steps > 1

    @property
    def local_batch(self) -> int:
        return self.running.local_batch

    @property
    def micro_steps(self) -> int:
        return self.running.micro_steps

    @property
    def global_batch(self) -> int:
        return self.config.global_batch

    @property
    def samples(self) -> int:
        """Samples the job has trained (all workers, all incarnations)."""
        return self.adaptation.samples

    @property
    def progress(self) -> float:
        """The job's progress in samples at the base batch."""
        return self.adaptation.progress

    def done(self, total: float) -> bool:
        return self.adaptation.progress >= total

    def first_sample(self, micro: int, rank: int) -> int:
        """Where `rank`'s slice of micro-step `micro` starts: the job's samples in order."""
        return self.samples + (micro * self.world + rank) * self.local_batch

    def micro_batches(self) -> Iterator[int]:
        """The step's micro-steps; DDP all-reduces only in the last one's backward."""
        last = self.micro_steps - 1
        for micro in range(self.micro_steps):
            self.ddp.require_backward_grad_sync = micro == last
            yield micro
            if micro < last and self.by_micro_batch:
                assert self.pieces is not None
                self.pieces.accumulated()
        self.ddp.require_backward_grad_sync = True

    def step(self) -> None:
        """After the last micro-step's backward: measure, set the learning rate, step, count."""
        if self.norms is not None:
            sample = self.norms.take()
            if self.by_micro_batch:
                assert self.pieces is not None
                sample = self.pieces.take(self.micro_steps)
            if sample is not None:
                self.adaptation.measure(sample, batch=self.global_batch)
            self.norms.start(self.world)
        factor = self.adaptation.lr_factor(self.global_batch)
        for group, base in zip(self.optimizer.param_groups, self._base_lrs, strict=True):
            group["lr"] = base * factor
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.adaptation.advance(self.global_batch)
        now = time.monotonic()
        if self._last_step is not None:
            self.adaptation.record_step(self.config, now - self._last_step)
        self._last_step = now
        self._steps += 1
        if self.adapt and self._steps % self.rechoose_every == 0:
            self.config = self._choose(self.config)
        if self.reporter is not None:
            self._report()

    def _choose(self, current: Config | None) -> Config:
        """Rank 0's choice, broadcast: every rank must run the same micro-steps, and each rank's
        step times (which the fit uses) differ a little."""
        chosen = self.adaptation.choose(self.world, current)
        shape = torch.tensor([chosen.local_batch, chosen.accum_steps], dtype=torch.int64)
        dist.broadcast(shape, src=0)
        return Config(self.world, int(shape[0]), int(shape[1]))

    def state_dict(self) -> dict[str, Any]:
        """What the checkpoint keeps: the statistics, step times and progress (rank 0's)."""
        return {**self.adaptation.state_dict(), "base_lrs": self._base_lrs}

    def _report(self) -> None:
        assert self.reporter is not None
        self.reporter.step(samples=self.local_batch * self.micro_steps)
        self.reporter.set_progress(self.progress)
        self.reporter.set_goodput(self.adaptation.report(self.config))

    def _hook(self, _: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's all-reduce of a bucket to its mean over replicas and accumulation steps, with
        the squared norms of this replica's mean gradient before it and the average after."""
        buffer = bucket.buffer()
        if self.micro_steps > 1:
            buffer.div_(self.micro_steps)
        if self.norms is not None:
            self.norms.before(bucket.index(), buffer)
        buffer.div_(self.world)
        future = dist.all_reduce(buffer, async_op=True).get_future()
        return future.then(self._averaged)

    def _averaged(self, future: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        averaged = future.value()[0]
        if self.norms is not None:
            self.norms.after(averaged)
        return averaged

    def _mean(self, value: torch.Tensor) -> torch.Tensor:
        """The replicas' mean of a one-element tensor (the local squared norms)."""
        reduced = value.clone()
        dist.all_reduce(reduced)
        return reduced / self.world
