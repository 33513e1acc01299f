"""Workload CSVs and the Pollux / ITP importers: good files load, bad ones say file:line: reason."""

import io
import tarfile
from pathlib import Path

import pytest

from autoscaler.sim.bundled import bundled_profiles, bundled_workload
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.importers import import_itp_workload, import_pollux_workload
from autoscaler.sim.inputs import read_workload
from autoscaler.sim.profiles import Profile, ProfileRow
from autoscaler.sim.workload import WorkloadJob, format_workload, parse_workload

PROFILES = {
    "toy": Profile(
        name="toy",
        gpu_counts=(1, 2, 4, 8),
        rows=(ProfileRow(64, (1.0, 1.8, 3.0, 4.0)), ProfileRow(128, (0.5, 0.9, 1.6, 0.0))),
    )
}
HEADER = "name,submit_time,profile,batch_size,iterations,min_replicas,max_replicas,replicas"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_good_workload_loads_sorted_by_submit_time(tmp_path: Path) -> None:
    text = f"{HEADER},weight\nlate,100.5,toy,64,1000,1,8,4,2\nearly,0,toy,128,10,1,4,1,1\n"
    jobs = read_workload(write(tmp_path, "w.csv", text), profiles=PROFILES)
    assert [job.name for job in jobs] == ["early", "late"]
    assert jobs[1] == WorkloadJob(
        "late", 100.5, "toy", 64, 1000, 1, 8, 4, gpus_per_replica=1, weight=2.0
    )
    assert parse_workload(format_workload(jobs), source="again", profiles=PROFILES) == jobs


def test_a_job_may_run_in_torchft_mode() -> None:
    text = f"{HEADER},fault_tolerance\na,0,toy,64,5,1,2,1,torchft\nb,0,toy,64,5,1,2,1,\n"
    jobs = parse_workload(text, source="w.csv", profiles=PROFILES)
    assert [job.torchft for job in jobs] == [True, False]
    assert parse_workload(format_workload(jobs), source="again", profiles=PROFILES) == jobs
    with pytest.raises(SimInputError, match="fault_tolerance 'yes' is not \"torchft\" or empty"):
        parse_workload(
            f"{HEADER},fault_tolerance\na,0,toy,64,5,1,2,1,yes\n", source="w", profiles=None
        )


def test_columns_may_come_in_any_order() -> None:
    text = "replicas,name,profile,batch_size,iterations,min_replicas,max_replicas,submit_time\n2,a,toy,64,5,1,2,0\n"
    (job,) = parse_workload(text, source="w.csv", profiles=PROFILES)
    assert (job.name, job.replicas, job.gpus_per_replica) == ("a", 2, 1)


BAD = [
    ("", 1, "the first line must be the header"),
    ("name,submit_time\n", 1, "bad header (missing ["),
    (f"{HEADER},colour\n", 1, "bad header (unknown ['colour'])"),
    (f"{HEADER},name\n", 1, "a column is repeated"),
    (f"{HEADER}\n", None, "no jobs"),
    (f"{HEADER}\na,0,toy,64,10,1,8\n", 2, "expected 8 fields, got 7"),
    (f"{HEADER}\nA_job,0,toy,64,10,1,8,1\n", 2, "name 'A_job' is not a DNS-1123 label"),
    (f"{HEADER}\na,soon,toy,64,10,1,8,1\n", 2, "submit_time 'soon' is not a number"),
    (f"{HEADER}\na,-5,toy,64,10,1,8,1\n", 2, "submit_time '-5' is not a finite number >= 0"),
    (f"{HEADER}\na,0,toy,64,0,1,8,1\n", 2, "iterations 0 is not positive"),
    (f"{HEADER}\na,0,toy,64,1.5,1,8,1\n", 2, "iterations '1.5' is not an integer"),
    (
        f"{HEADER}\na,0,toy,64,10,4,8,2\n",
        2,
        "need min_replicas <= replicas <= max_replicas, got 4 <= 2 <= 8",
    ),
    (f"{HEADER}\na,0,toy,64,10,1,8,9\n", 2, "got 1 <= 9 <= 8"),
    (f"{HEADER}\na,0,bert,64,10,1,8,1\n", 2, "unknown profile 'bert' (known: toy)"),
    (
        f"{HEADER}\na,0,toy,32,10,1,8,1\n",
        2,
        "batch_size 32: profile 'toy' has no such global batch size (64, 128)",
    ),
    (f"{HEADER}\na,0,toy,64,10,1,8,1\n\na,1,toy,64,10,1,8,1\n", 4, "job name 'a' listed twice"),
    (f"{HEADER},weight\na,0,toy,64,10,1,8,1,0\n", 2, "weight 0 is not positive"),
    (
        f"{HEADER},gpus_per_replica\na,0,toy,64,10,1,8,1,0\n",
        2,
        "gpus_per_replica 0 is not positive",
    ),
]


@pytest.mark.parametrize(("text", "line", "reason"), BAD)
def test_a_bad_workload_names_file_line_and_reason(
    tmp_path: Path, text: str, line: int | None, reason: str
) -> None:
    path = write(tmp_path, "w.csv", text)
    with pytest.raises(SimInputError) as caught:
        read_workload(path, profiles=PROFILES)
    assert (caught.value.file, caught.value.line) == (str(path), line)
    assert reason in caught.value.reason


def test_without_profiles_only_the_format_is_checked() -> None:
    (job,) = parse_workload(f"{HEADER}\na,0,anything,7,10,1,8,1\n", source="w.csv")
    assert job.profile == "anything"


def test_the_bundled_workload_is_72_jobs_on_the_bundled_profiles() -> None:
    jobs = bundled_workload()
    assert len(jobs) == 72
    assert jobs[0].submit_time == 0
    assert {job.profile for job in jobs} <= set(bundled_profiles())
    assert all(job.min_replicas == 1 and job.max_replicas == 32 for job in jobs)
    assert sorted({job.replicas for job in jobs}) == [1, 4, 8]


@pytest.fixture
def pollux(tmp_path: Path) -> Path:
    trace = tmp_path / "traces" / "toy"
    trace.mkdir(parents=True)
    write(trace, "validation-64.csv", "progress,iteration,metric,grad_sqr,grad_var\n1,100,0,1,1\n")
    write(trace, "validation-128.csv", "progress,iteration,metric,grad_sqr,grad_var\n1,40,0,1,1\n")
    return write(
        tmp_path,
        "workload-1.csv",
        "name,time,application,num_replicas,batch_size\ntoy-1,30,toy,16,128\ntoy-0,10,toy,2,64\n",
    )


def test_pollux_workloads_import_with_derived_iterations_and_bounds(pollux: Path) -> None:
    jobs = import_pollux_workload(pollux, traces=pollux.parent / "traces", profiles=PROFILES)
    assert jobs == (
        WorkloadJob("toy-0", 10.0, "toy", 64, 100, 1, 8, 2),
        WorkloadJob("toy-1", 30.0, "toy", 128, 40, 1, 4, 4),  # 8 GPUs do not fit batch 128
    )


def test_a_bad_pollux_workload_names_file_and_line(pollux: Path) -> None:
    pollux.write_text("name,time,application,num_replicas,batch_size\ntoy-0,10,yolo,2,64\n")
    with pytest.raises(SimInputError) as caught:
        import_pollux_workload(pollux, traces=pollux.parent / "traces", profiles=PROFILES)
    assert (caught.value.line, caught.value.reason) == (2, "unknown profile 'yolo' (known: toy)")


def itp_archive(folder: Path, rows: list[str]) -> Path:
    text = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
    data = (text + "\n".join(rows) + "\n").encode()
    path = folder / "traces.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("cluster01.csv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


ITP_ROWS = [
    "aaaaaaaa-1,500,300,toy,0,64,2,100",
    "bbbbbbbb-2,100,200,toy,0,128,16,100",
    "cccccccc-3,900,100,toy,0,64,1,100",
    "dddddddd-4,1300,100,toy,0,64,1,100",
]


def test_itp_windows_are_consecutive_submissions_shifted_to_zero(tmp_path: Path) -> None:
    archive = itp_archive(tmp_path, ITP_ROWS)
    jobs = import_itp_workload(archive, cluster="cluster01", count=2, start=0, profiles=PROFILES)
    assert jobs == (
        WorkloadJob("toy-bbbbbbbb", 0.0, "toy", 128, 200, 1, 4, 4),  # asked 16, at most 4 fit
        WorkloadJob("toy-aaaaaaaa", 400.0, "toy", 64, 300, 1, 8, 2),
    )
    drawn = import_itp_workload(archive, cluster="cluster01", count=2, seed=7, profiles=PROFILES)
    again = import_itp_workload(archive, cluster="cluster01", count=2, seed=7, profiles=PROFILES)
    assert drawn == again
    assert drawn[0].submit_time == 0


def test_itp_errors_name_the_archive_member_and_line(tmp_path: Path) -> None:
    archive = itp_archive(tmp_path, [*ITP_ROWS, "eeeeeeee-5,1400,100,toy,0,32,1,100"])
    with pytest.raises(SimInputError) as caught:
        import_itp_workload(archive, cluster="cluster01", count=5, start=0, profiles=PROFILES)
    assert caught.value.file == f"{archive}[cluster01.csv]"
    assert caught.value.line == 6
    assert "batch_size 32: profile 'toy' has no such global batch size" in caught.value.reason
    with pytest.raises(SimInputError, match=r"no cluster 'cluster09' \(has cluster01\)"):
        import_itp_workload(archive, cluster="cluster09", count=1, profiles=PROFILES)
    with pytest.raises(SimInputError, match=r"count 9 is not in 1..5"):
        import_itp_workload(archive, cluster="cluster01", count=9, profiles=PROFILES)
