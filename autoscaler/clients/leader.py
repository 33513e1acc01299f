"""Leader election on a `coordination.k8s.io/v1` Lease, so two replicas never both act.

`lease_action` is the pure decision (tested with tables); `LeaderElector` does the I/O through
`autoscaler.clients`. Timings follow client-go's defaults (15 s lease, 10 s renew deadline, 2 s
retry), scaled down in tests.
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.api.timestamps import format_micro_timestamp
from autoscaler.clients.kube import LEASES, ConflictError, Kube, NotFoundError

JSON = dict[str, Any]
log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class LeaseTimings:
    lease_seconds: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def lease_action(
    lease: JSON | None, *, identity: str, now: datetime, since: datetime | None = None
) -> str:
    """`create`, `renew` (ours), `acquire` (free or expired) or `wait` (someone else's).

    `since`: when this candidate first read the lease's current record (`lease_record`), on its
    own clock. As client-go does, a lease expires `leaseDurationSeconds` after that, never after
    the holder's `renewTime`: that stamp is the holder's clock, and with clocks 15 s apart a
    standby would take a live lease and both replicas would act. None: read just now.
    """
    if lease is None:
        return "create"
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if holder == identity:
        return "renew"
    duration = float(spec.get("leaseDurationSeconds") or 0)
    if not holder or spec.get("renewTime") is None:
        return "acquire"
    expires = (since or now) + timedelta(seconds=duration)
    return "acquire" if expires <= now else "wait"


def lease_record(lease: JSON | None) -> tuple[str, str, float] | None:
    """What must change for a lease to count as renewed: holder, renew stamp, duration."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return (
        spec.get("holderIdentity") or "",
        str(spec.get("renewTime")),
        float(spec.get("leaseDurationSeconds") or 0),
    )


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        timings: LeaseTimings = LeaseTimings(),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.timings, self.clock = timings, clock
        self.is_leader = threading.Event()
        # The lease record as last read, and when (on this clock) it was first read so.
        self._record: tuple[str, str, float] | None = None
        self._since = clock()

    def run(self, stop: threading.Event, *, on_lost: Callable[[], None]) -> None:
        """Block until leader (or `stop`), then keep renewing on a thread; `on_lost` if it fails."""
        while not stop.is_set() and not self.try_once():
            stop.wait(self.timings.retry_period)
        if stop.is_set():
            return
        self.is_leader.set()
        threading.Thread(
            target=self._renew, args=(stop, on_lost), name="lease", daemon=True
        ).start()

    def _renew(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew every retry period on a thread of its own, and give up once no renewal has
        succeeded for the renew deadline, whatever that thread is doing: a request to an API
        server that stopped answering (a partition) blocks for its whole timeout and the
        client's retries, long after a standby took the lease (the fault matrix's partition)."""
        renewed = [self.clock()]
        lost = threading.Event()

        def keep_renewing() -> None:
            while not stop.wait(self.timings.retry_period) and not lost.is_set():
                if self.try_once() and not lost.is_set():
                    renewed[0] = self.clock()

        threading.Thread(target=keep_renewing, name="lease-renew", daemon=True).start()
        while not stop.wait(min(self.timings.retry_period, self.timings.renew_deadline / 4)):
            if (self.clock() - renewed[0]).total_seconds() > self.timings.renew_deadline:
                lost.set()
                log.error("lost the lease %s/%s", self.namespace, self.name)
                self.is_leader.clear()
                on_lost()
                return

    def try_once(self) -> bool:
        try:
            lease = self.kube.get(LEASES, self.namespace, self.name)
        except NotFoundError:
            lease = None
        except Exception:  # an unreachable API server must not crash the elector
            log.exception("reading the lease failed")
            return False
        now = self.clock()
        record = lease_record(lease)
        if record != self._record:
            self._record, self._since = record, now
        action = lease_action(lease, identity=self.identity, now=now, since=self._since)
        if action == "wait":
            return False
        try:
            self._write(lease, acquiring=action != "renew")
        except (ConflictError, NotFoundError):
            return False  # another replica won the race
        except Exception:
            log.exception("writing the lease failed")
            return False
        return True

    def _write(self, lease: JSON | None, *, acquiring: bool) -> None:
        now = format_micro_timestamp(self.clock())
        spec = dict((lease or {}).get("spec") or {})
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.timings.lease_seconds)),
            renewTime=now,
        )
        if acquiring:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (lease is not None)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                **(lease or {}).get("metadata", {}),
                "name": self.name,
                "namespace": self.namespace,
            },
            "spec": spec,
        }
        if lease is None:
            self.kube.create(body)
        else:
            self.kube.replace(body)

    def release(self) -> None:
        """Give the lease up at shutdown so a standby takes over without waiting it out."""
        if not self.is_leader.is_set():
            return
        try:
            lease = self.kube.get(LEASES, self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"].update(holderIdentity="", leaseDurationSeconds=1)
                self.kube.replace(
                    {**lease, "apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
                )
        except Exception:
            log.exception("releasing the lease failed")
        self.is_leader.clear()
