"""Which node kube-scheduler's default profile gives one worker pod of an elastic job (pure).

Follows kubernetes/kubernetes pkg/scheduler/framework/plugins/interpodaffinity/scoring.go,
noderesources/least_allocated.go and the weights of apis/config/v1/default_plugins.go.

- Filter (NodeResourcesFit): a node fits when its free GPUs hold the pod.
- InterPodAffinity (weight 2): every worker of the job on a node adds the packing term's weight
  (the operator's preferred pod affinity to the job's own workers on the node's hostname;
  upstream counts each pair from both pods' terms, a factor the normalisation cancels), then the
  feasible nodes' sums are scaled to 0..100 between their minimum and maximum (truncated).
- NodeResourcesFit, LeastAllocated (weight 1): (free after placing / capacity) x 100, truncated.
  The default profile scores CPU and memory, not GPUs; here GPUs stand for a worker's requests.
- NodeResourcesBalancedAllocation is left out: with one resource it is the same on every node.
- The highest sum wins; a tie goes to the lowest node index (kube-scheduler picks at random).
"""

from collections.abc import Sequence

MAX_NODE_SCORE = 100
AFFINITY_WEIGHT = 2  # InterPodAffinity's weight in the default profile
FIT_WEIGHT = 1  # NodeResourcesFit's
TERM_WEIGHT = 100  # the packing term's weight (autoscaler.controller.placement.WEIGHT)


def least_allocated(free: int, capacity: int, size: int) -> int:
    """NodeResourcesFit's LeastAllocated score of a node once the pod of `size` GPUs is on it."""
    if capacity <= 0 or size > free:
        return 0
    return (free - size) * MAX_NODE_SCORE // capacity


def normalised(raw: Sequence[int]) -> list[int]:
    """InterPodAffinity's NormalizeScore: min-max scaled to 0..100 (all 0 when equal)."""
    if not raw:
        return []
    low, high = min(raw), max(raw)
    if high == low:
        return [0] * len(raw)
    return [int(MAX_NODE_SCORE * (value - low) / (high - low)) for value in raw]


def scores(
    free: Sequence[int], capacity: Sequence[int], own: Sequence[int], size: int
) -> list[int | None]:
    """Each node's weighted score for a pod of `size` GPUs whose job has `own[i]` workers on
    node i (None: the pod does not fit there)."""
    feasible = [i for i, room in enumerate(free) if room >= size]
    affinity = normalised([TERM_WEIGHT * own[i] for i in feasible])
    result: list[int | None] = [None] * len(free)
    for i, packing in zip(feasible, affinity, strict=True):
        fit = least_allocated(free[i], capacity[i], size)
        result[i] = AFFINITY_WEIGHT * packing + FIT_WEIGHT * fit
    return result


def pick_node(
    free: Sequence[int], capacity: Sequence[int], own: Sequence[int], size: int
) -> int | None:
    """The node the pod goes to: the highest score, the lowest index of a tie (None: no room)."""
    best: tuple[int, int] | None = None
    for i, score in enumerate(scores(free, capacity, own, size)):
        if score is not None and (best is None or score > best[0]):
            best = (score, i)
    return None if best is None else best[1]
