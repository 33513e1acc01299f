"""`autoscaler simulate`: the table, -o json, --out, the progress bar, and bad input (exit 2)."""

import json
import sys
from pathlib import Path

import pytest

from autoscaler.cli import main
from autoscaler.sim.lineup import DEFAULT_POLICIES

PROFILE = "global_batch_size,1,2,4,8\n10,1.0,1.8,3.2,5.0\n20,0,1.0,1.8,3.2\n"
HEADER = "name,submit_time,profile,batch_size,iterations,min_replicas,max_replicas,replicas"
JOBS = [
    "a,0,toy,10,600,1,8,1",
    "b,30,toy,10,1200,1,8,2",
    "c,90,toy,10,300,1,4,1",
    "d,200,toy,20,400,2,8,2",
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "toy.csv").write_text(PROFILE)
    workload = tmp_path / "workload.csv"
    workload.write_text("\n".join([HEADER, *JOBS]) + "\n")
    return workload, profiles


def simulate(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main(["simulate", "--gpus", "8", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_of_one_policy_on_a_tiny_workload(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    code, out, err = simulate(
        capsys, "--workload", workload, "--profiles", profiles, "--policies", "static", "-o", "json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert list(data["policies"]) == ["static"]
    figures = data["policies"]["static"]
    assert {
        "mean_jct_seconds",
        "p95_jct_seconds",
        "makespan_seconds",
        "gpu_utilization",
        "rescales",
        "mean_solve_seconds",
    } <= set(figures)
    assert figures["rescales"] == 0
    assert figures["finished"] == 4
    bound = data["lower_bound"]
    assert set(bound) == {"mean_jct_seconds", "p95_jct_seconds", "makespan_seconds"}
    assert figures["mean_jct_seconds"] >= bound["mean_jct_seconds"]
    relaxed = data["lp_bound"]
    assert bound["mean_jct_seconds"] <= relaxed["mean_jct_seconds"] <= figures["mean_jct_seconds"]
    assert relaxed["slot_seconds"] > 0
    ratio = figures["ratio_to_lower_bound"]["mean_jct"]
    assert ratio == pytest.approx(figures["mean_jct_seconds"] / relaxed["mean_jct_seconds"])
    assert data["rejected"] == []
    assert "simulating [" in err  # the progress bar
    assert "100%" in err


def test_declared_work_none_hides_the_totals_from_the_policies(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    runs = {}
    for declared in ("all", "none"):
        code, out, err = simulate(
            capsys, "--workload", workload, "--profiles", profiles, "--policies",
            "global-optimizer", "--declared-work", declared, "-o", "json",
        )  # fmt: skip
        assert code == 0, err
        runs[declared] = json.loads(out)
        assert runs[declared]["cluster"]["declared_work"] == declared
    figures = [runs[d]["policies"]["global-optimizer"]["mean_jct_seconds"] for d in runs]
    assert figures[0] != figures[1]  # the work left changes the counts
    with pytest.raises(SystemExit) as exit_info:
        simulate(capsys, "--declared-work", "some")
    assert exit_info.value.code == 2
    assert "invalid choice: 'some'" in capsys.readouterr().err


def test_the_table_lists_every_default_policy_and_the_bound(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    code, out, _ = simulate(capsys, "--workload", workload, "--profiles", profiles)
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("policy"))
    for column in ("mean JCT", "p95 JCT", "makespan", "GPU util", "rescales", "mean solve"):
        assert column in lines[header]
    count = len(DEFAULT_POLICIES)
    names = [line.split()[0] for line in lines[header + 1 : header + 1 + count]]
    assert names == list(DEFAULT_POLICIES)
    assert lines[header + 1 + count].startswith("LP bound (")
    assert lines[header + 2 + count].startswith("each job alone")
    assert "x)" in lines[header + 1]  # each figure with its ratio to the bound


def test_out_writes_results_and_plots(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    out_dir = tmp_path / "out"
    code, _, err = simulate(
        capsys,
        "--workload",
        workload,
        "--profiles",
        profiles,
        "--policies",
        "static,global-optimizer",
        "--out",
        out_dir,
    )
    assert code == 0, err
    results = json.loads((out_dir / "results.json").read_text())
    assert list(results["policies"]) == ["static", "global-optimizer"]
    assert len(results["policies"]["static"]["jobs"]) == 4
    for name in ("jct-cdf.png", "allocation.png", "utilisation.png"):
        assert (out_dir / name).read_bytes().startswith(b"\x89PNG")


def test_a_job_that_can_never_run_is_reported(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    workload.write_text("\n".join([HEADER, *JOBS, "never,10,toy,20,100,1,1,1"]) + "\n")
    args = ("--workload", workload, "--profiles", profiles, "--policies", "static")
    code, out, _ = simulate(capsys, *args)
    assert code == 0
    assert "can never run (not simulated): never: profile 'toy' cannot run batch 20" in out
    code, out, _ = simulate(capsys, *args, "-o", "json")
    rejected = json.loads(out)["rejected"]
    assert [entry["name"] for entry in rejected] == ["never"]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("e,0,bert,10,100,1,8,1", "unknown profile 'bert' (known: toy)"),
        ("e,0,toy,10,100,1,8", "expected 8 fields, got 7"),
        ("e,0,toy,10,lots,1,8,1", "iterations 'lots' is not an integer"),
        (
            "e,0,toy,32,100,1,8,1",
            "batch_size 32: profile 'toy' has no such global batch size (10, 20)",
        ),
    ],
)
def test_bad_workloads_exit_2_with_file_line_and_reason(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], row: str, reason: str
) -> None:
    workload, profiles = files
    workload.write_text("\n".join([HEADER, *JOBS[:2], row]) + "\n")
    code, out, err = simulate(capsys, "--workload", workload, "--profiles", profiles)
    assert code == 2
    assert out == ""
    assert f"{workload}:4: {reason}" in err


def test_bad_profiles_and_policies_exit_2(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    (profiles / "toy.csv").write_text("global_batch_size,1,2\n10,1.0,fast\n")
    code, _, err = simulate(capsys, "--workload", workload, "--profiles", profiles)
    assert code == 2
    assert f"{profiles / 'toy.csv'}:2: throughput 'fast' is not a number" in err
    (profiles / "toy.csv").write_text(PROFILE)
    code, _, err = simulate(
        capsys, "--workload", workload, "--profiles", profiles, "--policies", "static,nope"
    )
    assert code == 2
    assert "unknown policy 'nope'" in err


def test_a_pollux_workload_needs_pollux_traces(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    workload.write_text("name,time,application,num_replicas,batch_size\nx-0,0,toy,1,10\n")
    code, _, err = simulate(capsys, "--workload", workload, "--profiles", profiles)
    assert code == 2
    assert f"{workload}:1: a Pollux workload needs the Pollux traces folder" in err


def test_out_without_matplotlib_says_which_extra_to_install_before_simulating(
    files: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as in the operator's image
    workload, profiles = files
    out = tmp_path / "out"
    code, stdout, err = simulate(
        capsys, "--workload", workload, "--profiles", profiles, "--out", out
    )
    assert code == 2
    assert stdout == ""
    assert err.splitlines() == [
        "error: --out draws its plots with matplotlib, which is not installed:"
        " pip install 'pytorch-elastic-autoscaler[sim]'"
    ]
    assert not out.exists()


def test_queueing_adds_the_default_with_preemptible_jobs_as_rows_of_its_own(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    args = ["--workload", workload, "--profiles", profiles, "--policies", "static", "--queueing"]
    code, out, err = simulate(capsys, *args)
    assert code == 0, err
    names = [line.split("  ")[0] for line in out.splitlines()[3:5]]
    assert names == ["static", "global-optimizer (preemptible jobs)"]
    code, out, err = simulate(capsys, *args, "-o", "json")
    assert code == 0, err
    data = json.loads(out)
    assert list(data["policies"]) == ["static"]
    assert list(data["preemptible_jobs"]["policies"]) == ["global-optimizer"]


POLLUX_TRACES = Path(__file__).parents[2] / "benchmarks" / "data" / "pollux" / "traces"


def pollux_workload(folder: Path, *rows: str) -> Path:
    """A workload in Pollux's columns, one job per row."""
    path = folder / "pollux.csv"
    path.write_text("\n".join(["name,time,application,num_replicas,batch_size", *rows]) + "\n")
    return path


def test_goodput_runs_a_pollux_workload_and_shows_the_fixed_batch_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = pollux_workload(tmp_path, "cifar10-0,0,cifar10,4,2048", "cifar10-1,60,cifar10,2,512")
    code, out, _ = simulate(
        capsys, "--workload", workload, "--profiles", POLLUX_TRACES, "--goodput",
        "--policies", "global-optimizer", "--gpus-per-node", "4", "--parallel", "1", "-o", "json",
    )  # fmt: skip
    assert code == 0
    runs = json.loads(out)["policies"]
    assert set(runs) == {"global-optimizer", "global-optimizer (fixed batch)"}
    adaptive, fixed = (runs[name]["mean_jct_seconds"] for name in sorted(runs))
    assert adaptive < fixed  # co-adapting the batch finishes the same work sooner


def test_goodput_on_a_workload_without_pollux_traces_exits_2(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    code, _, err = simulate(
        capsys, "--workload", workload, "--profiles", profiles, "--goodput", "--parallel", "1"
    )
    assert code == 2
    assert "goodput needs Pollux traces" in err


def test_placement_rates_charge_a_goodput_job_split_over_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nodes of one GPU: a 2-worker job is always split, and slower only when that is charged."""
    workload = pollux_workload(tmp_path, "cifar10-0,0,cifar10,2,512")
    args = (
        "--workload", workload, "--profiles", POLLUX_TRACES, "--goodput", "--gpus", "2",
        "--gpus-per-node", "1", "--policies", "static", "--parallel", "1", "-o", "json",
    )  # fmt: skip
    means = {}
    for charged in (False, True):
        code, out, err = simulate(capsys, *args, *(["--placement-rates"] if charged else []))
        assert code == 0, err
        data = json.loads(out)
        assert data["cluster"]["placement_rates"] is charged
        means[charged] = data["policies"]["static"]["mean_jct_seconds"]
    assert means[True] > means[False] * 1.05


def test_placement_rates_without_goodput_exit_2(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    workload, profiles = files
    code, _, err = simulate(
        capsys, "--workload", workload, "--profiles", profiles, "--placement-rates"
    )
    assert code == 2
    assert "--placement-rates charges goodput jobs: add --goodput" in err
