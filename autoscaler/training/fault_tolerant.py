"""Train a job in torchft mode: resizes and lost pods never restart the surviving workers.

    from autoscaler.training.fault_tolerant import FaultTolerantTraining

    training = FaultTolerantTraining.from_pod(model, optimizer, batch_size=128)
    for step in training.steps(total_samples=1_000_000):
        inputs, labels = my_batch(step.first_sample, step.size)
        loss_fn(training.model(inputs), labels).backward()
    training.close()

Each Worker pod is one torchft replica group (torchft 0.2.0, pytorch/torchft; install the
`torchft` extra). Every step a quorum forms at the job's lighthouse; the gradients are averaged
across the groups in it; the update is applied only if every participant got there
(`should_commit`), so a failed step is applied by nobody and retried. A group that joins receives
the live model and optimizer state from a peer and trains from the next step; a group that leaves
is dropped by the lighthouse after its heartbeat timeout.

What this helper adds to torchft's Manager:
- set-up from the pod's environment (the operator sets it: see `autoscaler.fault_tolerance`);
- exactly-once data: step `s` trains samples from a counter every group agrees on (healed with the
  state), split by (participating rank, participants), so a sample is trained once and a failed
  step's samples are trained again by the next one;
- `batch="per-group"` (each group trains `batch_size`, the learning rate scaled by the number of
  participants, the linear rule) or `batch="global"` (`batch_size` split across the participants,
  gradients weighted by each group's share, the learning rate unchanged);
- torchft's DDP wrapper with its comm hook fixed: in torchft 0.2.0 a group dying mid-step makes
  the hook assert and every survivor crash; here a failed all-reduce hands the bucket back (the
  step then does not commit anyway);
- a clean stop on SIGTERM at a step boundary (exit status 143, as if the signal had killed it,
  so the operator treats it as the retryable stop it was);
- checkpoints from one group only (`training.checkpoint_due`), loaded by every group at start;
- goodput (opt-in, `goodput=GoodputSpec(...)`): the gradient noise measured around the
  all-reduce (a group alone in its quorum: from its step run as two half micro-batches, as one
  torchrun worker does), and at every quorum change the local batch and accumulation steps that
  maximise goodput for the participants (and every `RECHOOSE_EVERY` steps); each step is then
  yielded once per micro-batch (the gradients synchronised in the last), the learning rate
  follows the declared rule, and `total_samples` counts samples at the base batch. The
  measurements travel with the state to a joining group and into the checkpoint; the step times
  are averaged over the participants (in the same tiny all-reduce as the norms), so every group
  fits the same model and picks the same batch.
"""

import os
import signal
import socket
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch.distributed import TCPStore
from torchft import Manager
from torchft.checkpointing.pg_transport import PGTransport
from torchft.optim import OptimizerWrapper
from torchft.process_group import ProcessGroupDummy, ProcessGroupGloo

from autoscaler import fault_tolerance as ft
from autoscaler.training.adaptation import (
    RECHOOSE_EVERY,
    Adaptation,
    Config,
    GoodputSpec,
    NormSample,
    in_halves,
)
from autoscaler.training.batches import BatchMode, Step, plan_step, samples_done
from autoscaler.training.files import write_atomically
from autoscaler.training.gradient_norms import GradientNorms, MicroBatchNorms
from autoscaler.training.teardown import collect_garbage_at_exit

STOPPED_BY_SIGNAL = 128 + signal.SIGTERM


@dataclass(frozen=True)
class PodSettings:
    """The pod's torchft settings, from the variables the operator sets."""

    lighthouse: str
    replica_group: str
    min_replicas: int
    address: str  # the pod IP: peers connect to the group's store and manager here
    store_port: int
    timeout: timedelta

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "PodSettings":
        missing = [
            name
            for name in (ft.ENV_LIGHTHOUSE, ft.ENV_REPLICA_GROUP, "MASTER_PORT")
            if not env.get(name)
        ]
        if missing:
            raise RuntimeError(
                f"not a torchft pod: {', '.join(missing)} unset (the job needs the annotation "
                f"{ft.ANNOTATION}: {ft.TORCHFT})"
            )
        return cls(
            lighthouse=env[ft.ENV_LIGHTHOUSE],
            replica_group=env[ft.ENV_REPLICA_GROUP],
            min_replicas=int(env.get(ft.ENV_MIN_REPLICAS, "1")),
            address=env.get(ft.ENV_POD_IP) or socket.gethostbyname(socket.gethostname()),
            store_port=int(env["MASTER_PORT"]),
            timeout=timedelta(seconds=float(env.get(ft.ENV_TIMEOUT, ft.DEFAULT_TIMEOUT_SECONDS))),
        )


class DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """torchft's DDP wrapper (a dummy process group soaks up DDP's own collectives; buckets never
    rebuilt, so a healed group's match the others') with a comm hook that survives a failed
    all-reduce (see the module doc); `weight` scales this group's gradients before averaging."""

    def __init__(self, manager: Manager, module: torch.nn.Module) -> None:
        dummy = ProcessGroupDummy(0, 1)
        super().__init__(module, process_group=dummy, find_unused_parameters=True)
        self.manager = manager
        self.weight = 1.0
        self.micro_steps = 1  # goodput: the accumulated gradient is their sum
        self.norms: GradientNorms | None = None
        self.participating = True
        self.register_comm_hook(self, _weighted_allreduce)


# DDP checks the hook's annotations at run time: no `from __future__ import annotations` here.
def _weighted_allreduce(
    ddp: DistributedDataParallel, bucket: torch.distributed.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    if ddp.weight != 1.0 or ddp.micro_steps != 1:
        buffer.mul_(ddp.weight / ddp.micro_steps)
    if ddp.norms is not None:  # a healing group's gradient is no piece: it counts as zero
        ddp.norms.before(bucket.index(), buffer if ddp.participating else torch.zeros(1))
    ddp.manager.allreduce(buffer).wait()  # averages in place; a failure is recorded, not raised
    if ddp.norms is not None:
        ddp.norms.after(buffer)
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(buffer)
    return done


class FaultTolerantTraining:
    """A model and optimizer trained by this pod's replica group (one process per pod)."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        batch_size: int,
        settings: PodSettings,
        batch: BatchMode = "per-group",
        checkpoint: Path | None = None,
        checkpoint_every: int = 50,
        goodput: GoodputSpec | None = None,
    ) -> None:
        if batch_size < 1 or checkpoint_every < 1:
            raise ValueError("batch_size and checkpoint_every must be positive")
        self.batch_size, self.batch = batch_size, batch
        self.checkpoint_path, self.checkpoint_every = checkpoint, checkpoint_every
        self._module, self._inner = model, optimizer
        self._base_lrs = [group["lr"] for group in optimizer.param_groups]
        self._stop = False
        self.adaptation = None if goodput is None else Adaptation(goodput)
        self.config: Config | None = None  # goodput: the batch in use
        # goodput with one participant: its step's micro-batches are the pieces it measures
        self.pieces = None if goodput is None else MicroBatchNorms(list(model.parameters()))
        self._by_pieces = False
        self._last_commit: float | None = None  # goodput: the next step is timed from here
        self._step_seconds = 0.0  # goodput: the previous step's, averaged over participants
        self.store = TCPStore(
            settings.address, settings.store_port, is_master=True, wait_for_workers=False
        )
        process_group = ProcessGroupGloo(timeout=settings.timeout)
        self.manager = Manager(
            pg=process_group,
            load_state_dict=self._load_state,
            state_dict=self._state,
            min_replica_size=settings.min_replicas,
            timeout=settings.timeout,
            rank=0,
            world_size=1,
            store_addr=settings.address,
            store_port=settings.store_port,
            lighthouse_addr=settings.lighthouse,
            replica_id=settings.replica_group,
            hostname=settings.address,
            # the HTTP transport advertises the pod's hostname, which peers cannot resolve
            checkpoint_transport=PGTransport(
                process_group, timeout=settings.timeout, device=torch.device("cpu")
            ),
        )
        self.optimizer = OptimizerWrapper(self.manager, optimizer)
        self.model = DistributedDataParallel(self.manager, model)
        if self.adaptation is not None:
            self.model.norms = GradientNorms(self._mean_over_participants)
        self.resumed_from = self._load_checkpoint()
        collect_garbage_at_exit()  # the manager's callbacks and the comm hook are cycles

    @classmethod
    def from_pod(
        cls, model: torch.nn.Module, optimizer: torch.optim.Optimizer, **options: Any
    ) -> "FaultTolerantTraining":
        return cls(model, optimizer, settings=PodSettings.from_env(), **options)

    def stop_on_sigterm(self) -> None:
        """SIGTERM ends the loop at the next step boundary instead of killing mid-step."""
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "_stop", True))

    @property
    def stopping(self) -> bool:
        return self._stop

    def samples_done(self) -> int:
        if self.adaptation is not None:
            return self.adaptation.samples
        return samples_done(
            number=self.manager.current_step(),
            batches_committed=self.manager.batches_committed(),
            batch_size=self.batch_size,
            batch=self.batch,
        )

    def steps(
        self,
        *,
        total_samples: float | Callable[[], float] | None = None,
        on_commit: Callable[[Step, bool], None] | None = None,
    ) -> Iterator[Step]:
        """Yields each step to train (forward and backward on `step`'s samples), then commits it;
        ends when the job has trained `total_samples` (a function: asked before every step, for
        work that may change while the job runs) or a stop was asked for. `on_commit` gets
        the step and whether it committed; a committed step's `number` is then the job's number
        of it (a group that healed during the step took the number of the group it healed from)."""
        while not self._stop and not self._trained(total_samples):
            self.optimizer.zero_grad()  # starts the step's quorum
            if self.adaptation is None:
                step = plan_step(
                    number=self.manager.current_step(),
                    batches_committed=self.manager.batches_committed(),
                    rank=self.manager.participating_rank(),
                    participants=self.manager.num_participants(),
                    batch_size=self.batch_size,
                    batch=self.batch,
                )
                self._weigh(step)
                yield step
            else:
                step = yield from self._micro_steps()
            sample = None if self.model.norms is None else self.model.norms.take()
            if self._by_pieces:
                assert self.pieces is not None
                sample = self.pieces.take(self.model.micro_steps)
            committed = self.manager.should_commit()  # a healing group loads its state here
            if committed:
                self._pace(step)
                if self.adaptation is not None:
                    self._adapt(sample)
                self._inner.step()
                step = replace(step, number=self.manager.current_step() - 1)
                self._save_checkpoint_if_due(step)
            if on_commit is not None:
                on_commit(step, committed)

    def _trained(self, total_samples: float | Callable[[], float] | None) -> bool:
        if total_samples is None:
            return False
        if callable(total_samples):
            total_samples = total_samples()
        if self.adaptation is not None:
            return self.adaptation.progress >= total_samples
        return self.samples_done() >= total_samples

    def _micro_steps(self) -> Generator[Step, None, Step]:
        """Goodput: the step's micro-batches at the batch chosen for the participants (chosen
        again when they change); returns the step's last."""
        assert self.adaptation is not None
        assert self.model.norms is not None
        participants = self.manager.num_participants()
        # every group holds the same measurements, so all choose alike
        due = self.manager.current_step() % RECHOOSE_EVERY == 0
        if self.config is None or self.config.replicas != participants or due:
            self.config = self.adaptation.choose(participants, self.config)
        rank = self.manager.participating_rank()
        running = in_halves(self.config)  # one participant: measured from its micro-batches
        self._by_pieces = participants == 1 and rank is not None and running.micro_steps > 1
        self.model.norms.start(participants)
        self.model.micro_steps = running.micro_steps
        self.model.participating = rank is not None
        slot, local = rank or 0, running.local_batch
        number, step = self.manager.current_step(), None
        assert self.pieces is not None
        self.pieces.start()
        for micro in range(running.micro_steps):
            self.model.require_backward_grad_sync = micro == running.accum_steps
            first = self.adaptation.samples + (micro * participants + slot) * local
            step = Step(number, first, local, participants, participating=rank is not None)
            yield step
            if micro < running.accum_steps and self._by_pieces:
                self.pieces.accumulated()
        self.model.require_backward_grad_sync = True
        assert step is not None
        return step

    def _adapt(self, sample: NormSample | None) -> None:
        """Goodput, after a commit: the step's measurements, its learning rate and progress."""
        assert self.adaptation is not None
        assert self.config is not None
        batch = self.config.global_batch
        if sample is not None:
            self.adaptation.measure(sample, batch=batch)
        if self._last_commit is not None and self._step_seconds > 0:  # timed at this step's sync
            self.adaptation.record_step(self.config, self._step_seconds)
        self._last_commit = time.monotonic()
        factor = self.adaptation.lr_factor(batch)
        for group, base in zip(self._inner.param_groups, self._base_lrs, strict=True):
            group["lr"] = base * factor
        self.adaptation.advance(batch)

    def _mean_over_participants(self, local: torch.Tensor) -> torch.Tensor:
        """One all-reduce of the local squared norm and this step's seconds so far."""
        seconds = 0.0 if self._last_commit is None else time.monotonic() - self._last_commit
        packed = torch.stack([local, torch.tensor(seconds, dtype=torch.float64)])
        self.manager.allreduce(packed).wait()
        self._step_seconds = float(packed[1])
        return packed[0]

    def close(self) -> None:
        """Leave the job: heartbeats stop, so the others drop this group after the timeout."""
        self.manager.shutdown(wait=False)

    def _weigh(self, step: Step) -> None:
        """`global` batches: this group's share of the step's samples weighs its gradients."""
        if self.batch == "global":
            self.model.weight = step.size * step.participants / self.batch_size

    def _pace(self, step: Step) -> None:
        """`per-group` batches: the learning rate follows the global batch (the linear rule).
        Set after the commit: a healing group's loaded optimizer state carries its sender's."""
        if self.batch == "per-group" and self.adaptation is None:
            for group, base in zip(self._inner.param_groups, self._base_lrs, strict=True):
                group["lr"] = base * step.participants

    def checkpoint_due(self, step: Step) -> bool:
        """One group (the first participant) writes the job's checkpoint every few steps."""
        return (
            self.checkpoint_path is not None
            and step.participating
            and self.manager.participating_rank() == 0
            and (step.number + 1) % self.checkpoint_every == 0
        )

    def _save_checkpoint_if_due(self, step: Step) -> None:
        if not self.checkpoint_due(step):
            return
        assert self.checkpoint_path is not None
        state = {"user": self._state(), "torchft": self.manager.state_dict()}
        # atomic: a kill mid-write leaves the old one
        write_atomically(self.checkpoint_path, lambda file: torch.save(state, file))

    def _load_checkpoint(self) -> int:
        """The committed step this group starts from: the checkpoint's, else 0; a group behind
        the quorum heals from a peer at its first step anyway."""
        if self.checkpoint_path is None or not self.checkpoint_path.exists():
            return 0
        state = torch.load(self.checkpoint_path, weights_only=True)
        self._load_state(state["user"])
        self.manager.load_state_dict(state["torchft"])
        return int(self.manager.current_step())

    def _state(self) -> dict[str, Any]:
        state = {"model": self._module.state_dict(), "optim": self._inner.state_dict()}
        if self.adaptation is not None:
            config = None if self.config is None else list(self.config.key)
            state["goodput"] = {**self.adaptation.state_dict(), "config": config}
        return state

    def _load_state(self, state: dict[str, Any]) -> None:
        self._module.load_state_dict(state["model"])
        self._inner.load_state_dict(state["optim"])
        if self.adaptation is not None and "goodput" in state:
            goodput = state["goodput"]
            self.adaptation = Adaptation(self.adaptation.spec, goodput)
            self.config = None if goodput["config"] is None else Config(*goodput["config"])
