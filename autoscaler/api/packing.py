"""The planned placement (pure): a job's workers placed as one unit, on as few nodes as they fill.

kube-scheduler places one pod at a time, and a job grows into whatever GPUs are free, so a busy
cluster leaves jobs spread over more nodes than their GPUs fill (the engine's curves assume
them packed). The planned placement places them so instead (the operator's
`--planned-placement`, `autoscaler.controller.planned_placement`; the simulator's
`planned_placement`):
- a job's workers are placed together, at its start, whenever they restart anyway (a torchrun
  job's count changed) and whenever it can grow, on as few nodes as possible: the roomiest nodes
  first, the last workers on the tightest node that holds them all, so that roomy nodes stay
  whole for larger jobs;
- a job takes the most workers, up to its spec, that it can have packed; those it cannot wait
  (their pods held back) and are placed at a later instant, when room frees up;
- a re-placed job keeps every worker whose node stays in its placement: only the others move.
"""

from collections import Counter
from collections.abc import Collection, Mapping, Sequence


def nodes_needed(count: int, *, size: int, per_node: int) -> int:
    """How many nodes `count` pods of `size` GPUs fill at the least."""
    return -(-count * size // per_node)


def fewest_nodes(free: Sequence[int], *, count: int, size: int) -> list[int]:
    """A node per pod for up to `count` pods of `size` GPUs, on as few nodes as possible (fewer
    pods when the free GPUs hold fewer)."""
    room = {node: left // size for node, left in enumerate(free) if left >= size}
    chosen: list[int] = []
    while len(chosen) < count and room:
        wanted = count - len(chosen)
        holding = [node for node, pods in room.items() if pods >= wanted]
        if holding:
            node = min(holding, key=lambda n: (room[n], n))  # the tightest that holds the rest
        else:
            node = max(room, key=lambda n: (room[n], -n))  # the roomiest
        chosen += [node] * min(room.pop(node), wanted)
    return chosen


def packed(
    free: Sequence[int], *, low: int, high: int, size: int, per_node: int
) -> list[int] | None:
    """The nodes of the most pods, from `high` down to `low`, that fit on no more nodes than
    their GPUs fill; None when not even `low` do."""
    for count in range(high, max(low, 1) - 1, -1):
        nodes = fewest_nodes(free, count=count, size=size)
        fill = nodes_needed(count, size=size, per_node=per_node)
        if len(nodes) == count and len(set(nodes)) <= fill:
            return nodes
    return None


def kept(current: Mapping[int, int], target: Collection[int]) -> tuple[list[int], list[int]]:
    """Which of a job's pods (index -> node) stay for a `target` placement (a node per pod):
    the indices kept, the lowest first on each node, and the target's nodes still to fill."""
    wanted = Counter(target)
    stay: list[int] = []
    for index in sorted(current):
        node = current[index]
        if wanted[node] > 0:
            wanted[node] -= 1
            stay.append(index)
    return stay, sorted(wanted.elements())
