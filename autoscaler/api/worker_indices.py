"""Which worker indices an elastic torchrun job keeps when its count changes (pure; the operator
and the simulator both follow it).

The engine prices a job's throughput with its workers packed on as few nodes as they fill.
kube-scheduler chooses where a new worker goes; which workers leave is the operator's choice, so
a scale-down empties the job's least-filled nodes first:
- workers on no node (pending, or failed) go first, the highest index first;
- then the workers on the node that holds the fewest of the job's workers, worker-0's node last
  (it is never emptied); a tie goes to the highest index, so on one node the highest indices
  go, as upstream's operator removes them;
- index 0 goes last: its pod hosts the job's rendezvous.
A scale-up fills the lowest free indices.
"""

from collections import Counter
from collections.abc import Collection, Hashable, Mapping

RENDEZVOUS_INDEX = 0


def leaving(placed: Mapping[int, Hashable | None], *, keep: int) -> list[int]:
    """The indices that go so that `keep` of `placed` remain, in the order they go.
    `placed`: each present worker's node (None: on no node)."""
    left = dict(placed)
    gone: list[int] = []
    while len(left) > max(keep, 0):
        index = next_to_go(left)
        gone.append(index)
        del left[index]
    return gone


def next_to_go(placed: Mapping[int, Hashable | None]) -> int:
    """The one index a scale-down by one removes from `placed` (not empty)."""
    candidates = [i for i in placed if i != RENDEZVOUS_INDEX] or list(placed)
    unplaced = [i for i in candidates if placed[i] is None]
    if unplaced:
        return max(unplaced)
    anchor = placed.get(RENDEZVOUS_INDEX)
    fill = Counter(placed.values())
    return max(candidates, key=lambda i: (placed[i] != anchor, -fill[placed[i]], i))


def lowest_free(taken: Collection[int], *, count: int) -> list[int]:
    """The `count` lowest indices not in `taken`."""
    free: list[int] = []
    index = 0
    while len(free) < count:
        if index not in taken:
            free.append(index)
        index += 1
    return free
