"""The planned placement (pure): a job's workers placed as one unit, on as few nodes as they fill.

kube-scheduler places one pod at a time, and a job grows into whatever GPUs are free, so a busy
cluster leaves jobs spread over more nodes than their GPUs fill (the engine's curves assume
them packed). The planned placement places them so instead (the operator's default,
`--planned-placement`, `autoscaler.controller.planned_placement`; the simulator's
`planned_placement`):
- a job's workers are placed together, at its start, whenever they restart anyway (a torchrun
  job's count changed) and whenever it can grow, on as few nodes as possible: the roomiest nodes
  first, the last workers on the tightest node that holds them all, so that roomy nodes stay
  whole for larger jobs; between nodes as roomy, those the job already runs on (worker-0's
  first), so a growth moves no worker it need not;
- a job takes the most workers, up to its spec, that it can have packed; those it cannot wait
  (their pods held back) and are placed at a later instant, when room frees up;
- a re-placed job keeps every worker whose node stays in its placement: only the others move.
"""

from collections import Counter
from collections.abc import Collection, Mapping, Sequence


def nodes_needed(count: int, *, size: int, per_node: int) -> int:
    """How many nodes `count` pods of `size` GPUs fill at the least."""
    return -(-count * size // per_node)


def home(current: Mapping[int, int]) -> dict[int, int]:
    """How much a job's placement (pod index -> node) holds each node for a tie: its pods
    there, worker-0's node above any other."""
    weight = Counter(current.values())
    if 0 in current:
        weight[current[0]] += len(current)
    return dict(weight)


def fewest_nodes(
    free: Sequence[int], *, count: int, size: int, prefer: Mapping[int, int] | None = None
) -> list[int]:
    """A node per pod for up to `count` pods of `size` GPUs, on as few nodes as possible (fewer
    pods when the free GPUs hold fewer); between nodes of equal room, the most `prefer`red
    (`home`), then the first."""
    held = prefer or {}
    room = {node: left // size for node, left in enumerate(free) if left >= size}
    chosen: list[int] = []
    while len(chosen) < count and room:
        wanted = count - len(chosen)
        holding = [node for node, pods in room.items() if pods >= wanted]
        if holding:  # the tightest that holds the rest
            node = min(holding, key=lambda n: (room[n], -held.get(n, 0), n))
        else:  # the roomiest
            node = max(room, key=lambda n: (room[n], held.get(n, 0), -n))
        chosen += [node] * min(room.pop(node), wanted)
    return chosen


def packed(
    free: Sequence[int],
    *,
    low: int,
    high: int,
    size: int,
    per_node: int,
    prefer: Mapping[int, int] | None = None,
) -> list[int] | None:
    """The nodes of the most pods, from `high` down to `low`, that fit on no more nodes than
    their GPUs fill (ties as `fewest_nodes`); None when not even `low` do."""
    for count in range(high, max(low, 1) - 1, -1):
        nodes = fewest_nodes(free, count=count, size=size, prefer=prefer)
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
