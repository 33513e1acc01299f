"""A comparison's plots: the JCT distribution, the allocation over time, the GPU utilisation.

Each function returns a matplotlib `Figure` (a notebook shows it as it is); `write_plots` saves
the three as PNGs. Figures are built without pyplot, so nothing here touches global state.
"""

from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from autoscaler.sim.comparison import Comparison
from autoscaler.sim.outcome import PolicyRun

HOUR = 3600.0


def jct_cdf(comparison: Comparison) -> Figure:
    """The share of jobs done within each JCT, per policy, beside the jobs' lower bounds."""
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    curves = {name: [j.jct for j in run.result.jobs] for name, run in comparison.runs.items()}
    curves["lower bound"] = list(comparison.lower_bound.jobs.values())
    for name, values in curves.items():
        finished = np.sort([value / HOUR for value in values if value is not None])
        if not len(finished):
            continue
        share = np.arange(1, len(finished) + 1) / len(values)
        style = {"color": "black", "linestyle": "--"} if name == "lower bound" else {}
        axes.step(finished, share, where="post", label=name, **style)  # type: ignore[arg-type]
    axes.set_xscale("log")
    axes.set_xlabel("job completion time (hours, log scale)")
    axes.set_ylabel("share of jobs finished")
    axes.set_title("JCT distribution")
    axes.grid(alpha=0.3)
    axes.legend()
    return figure


def _series(run: PolicyRun) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(sample times in hours, job names, GPUs of each job at each sample) of one run."""
    timeline = run.result.timeline
    names = sorted({name for sample in timeline for name in sample.gpus})
    index = {name: i for i, name in enumerate(names)}
    gpus = np.zeros((len(names), len(timeline) + 1))
    for column, sample in enumerate(timeline):
        for name, count in sample.gpus.items():
            gpus[index[name], column] = count
    times = [sample.seconds for sample in timeline] + [run.result.end]
    gpus[:, -1] = gpus[:, -2] if len(timeline) else 0
    return np.array(times) / HOUR, names, gpus


def allocation(comparison: Comparison) -> Figure:
    """GPUs held by each job over time (one colour band per job), one panel per policy."""
    runs = list(comparison.runs.values())
    figure = Figure(figsize=(10, 2.2 * len(runs) + 0.5), layout="constrained")
    panels = figure.subplots(len(runs), 1, sharex=True, squeeze=False)[:, 0]
    for axes, run in zip(panels, runs, strict=True):
        times, names, gpus = _series(run)
        if names:
            colours = [f"C{i % 10}" for i in range(len(names))]
            axes.stackplot(times, gpus, step="post", colors=colours, linewidth=0)
        axes.set_ylim(0, comparison.config.gpus)
        axes.set_ylabel("GPUs")
        axes.set_title(run.name, loc="left", fontsize="medium")
    panels[-1].set_xlabel("time (hours)")
    figure.suptitle("allocation over time (a band per job)")
    return figure


def _binned(run: PolicyRun, *, edges: np.ndarray) -> np.ndarray:
    """Mean training GPUs in each bin of `edges` (hours)."""
    timeline = run.result.timeline
    starts = np.array([sample.seconds for sample in timeline]) / HOUR
    ends = np.append(starts[1:], run.result.end / HOUR)
    training = np.array([sample.training for sample in timeline], dtype=float)
    lows, highs = edges[:-1, None], edges[1:, None]
    overlap = np.clip(np.minimum(ends, highs) - np.maximum(starts, lows), 0.0, None)
    return np.asarray((overlap * training).sum(axis=1) / (highs - lows)[:, 0])


def utilisation(comparison: Comparison, *, bins: int = 60) -> Figure:
    """The share of the cluster's GPUs that train (not idle, not restarting), over time."""
    figure = Figure(figsize=(8, 4.5), layout="constrained")
    axes: Axes = figure.add_subplot()
    end = max(run.result.end for run in comparison.runs.values()) / HOUR
    edges = np.linspace(0.0, max(end, 1e-9), bins + 1)
    middles = (edges[:-1] + edges[1:]) / 2
    for run in comparison.runs.values():
        if run.result.timeline:
            share = _binned(run, edges=edges) / comparison.config.gpus
            axes.plot(middles, share, label=f"{run.name} ({run.result.gpu_utilisation:.0%})")
    axes.set_ylim(0, 1.02)
    axes.set_xlabel("time (hours)")
    axes.set_ylabel("GPUs training / all GPUs")
    axes.set_title(f"GPU utilisation (mean over {bins} intervals; run mean in brackets)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def write_plots(comparison: Comparison, folder: Path) -> list[Path]:
    """`jct-cdf.png`, `allocation.png` and `utilisation.png` in `folder` (created if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (
        ("jct-cdf", jct_cdf),
        ("allocation", allocation),
        ("utilisation", utilisation),
    ):
        path = folder / f"{name}.png"
        draw(comparison).savefig(path, dpi=100)
        written.append(path)
    return written
