"""Throughput profiles: ElasticFlow CSVs, Pollux traces, interpolation, and errors with file:line."""

from pathlib import Path

import pytest

from autoscaler.sim.bundled import bundled_profiles
from autoscaler.sim.errors import SimInputError
from autoscaler.sim.pollux import load_pollux_profile, load_pollux_profiles, pollux_iterations
from autoscaler.sim.profiles import (
    interpolate,
    load_profile,
    load_profiles,
)

GOOD = """global_batch_size,1,2,4,8,16
64,1.0,1.8,3.0,,4.0
128,0.5,0.9,nan,2.0,0
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_good_profile_loads_with_the_file_stem_as_its_name(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "resnet.csv", GOOD))
    assert profile.name == "resnet"
    assert profile.gpu_counts == (1, 2, 4, 8, 16)
    assert profile.batch_sizes == (64, 128)
    assert profile.rows[0].rates == (1.0, 1.8, 3.0, None, 4.0)
    assert profile.rows[1].rates == (0.5, 0.9, None, 2.0, 0.0)
    assert profile.samples_per_second(64, 2) == pytest.approx(1.8 * 64)


def test_a_folder_loads_every_csv_by_stem(tmp_path: Path) -> None:
    write(tmp_path, "a.csv", GOOD)
    write(tmp_path, "b.csv", GOOD)
    write(tmp_path, "notes.txt", "not a profile")
    assert sorted(load_profiles(tmp_path)) == ["a", "b"]


@pytest.mark.parametrize(
    ("batch", "gpus", "expected"),
    [
        (64, 0, 0.0),  # no GPU, no progress
        (64, 1, 1.0),  # measured
        (64, 3, 2.4),  # linear between 2 (1.8) and 4 (3.0)
        (64, 6, 3.0 + (4.0 - 3.0) * (6 - 4) / (16 - 4)),  # 8 not measured: between 4 and 16
        (64, 16, 4.0),
        (64, 64, 4.0),  # beyond the largest measured count: held flat
        (128, 3, 0.9 + (2.0 - 0.9) * (3 - 2) / (8 - 2)),  # 4 is nan: between 2 and 8
        (128, 8, 2.0),
        (128, 12, 0.0),  # between a count that fits and one that does not: not known to fit
        (128, 16, 0.0),  # does not fit
        (128, 32, 0.0),  # held flat at "does not fit"
    ],
)
def test_interpolation_table(tmp_path: Path, batch: int, gpus: int, expected: float) -> None:
    profile = load_profile(write(tmp_path, "p.csv", GOOD))
    assert profile.throughput(batch, gpus) == pytest.approx(expected)


def test_gpus_per_replica_multiplies_the_gpu_count(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "p.csv", GOOD))
    assert profile.throughput(64, 2, gpus_per_replica=2) == profile.throughput(64, 4)


def test_below_the_smallest_measured_count_scales_from_the_origin() -> None:
    assert interpolate(((4, 2.0), (8, 3.0)), 2) == pytest.approx(1.0)
    assert interpolate(((4, 0.0), (8, 3.0)), 2) == 0.0
    assert interpolate((), 4) == 0.0


BAD = [
    ("", 1, "the first line must be the header"),
    ("batch,1,2\n64,1,2\n", 1, "header must be 'global_batch_size,<GPU count>,...'"),
    ("global_batch_size\n64\n", 1, "header must be"),
    ("global_batch_size,1,x\n64,1,2\n", 1, "GPU count 'x' is not an integer"),
    ("global_batch_size,1,0\n64,1,2\n", 1, "GPU count 0 is not positive"),
    ("global_batch_size,2,1\n64,1,2\n", 1, "GPU counts must increase strictly"),
    ("global_batch_size,1,2\n64,1\n", 2, "expected 3 fields (batch size + 2 GPU counts), got 2"),
    ("global_batch_size,1,2\n64,1,2\nabc,1,2\n", 3, "global batch size 'abc' is not an integer"),
    ("global_batch_size,1,2\n-64,1,2\n", 2, "global batch size -64 is not positive"),
    ("global_batch_size,1,2\n64,1,fast\n", 2, "throughput 'fast' is not a number"),
    ("global_batch_size,1,2\n64,1,-2\n", 2, "throughput '-2' is not a finite number >= 0"),
    ("global_batch_size,1,2\n64,1,inf\n", 2, "throughput 'inf' is not a finite number >= 0"),
    ("global_batch_size,1,2\n64,,nan\n", 2, "batch size 64 has no measured GPU count"),
    ("global_batch_size,1,2\n64,1,2\n\n64,1,2\n", 4, "global batch size 64 listed twice"),
    ("global_batch_size,1,2\n", None, "no batch size rows"),
]


@pytest.mark.parametrize(("text", "line", "reason"), BAD)
def test_malformed_csv_names_file_line_and_reason(
    tmp_path: Path, text: str, line: int | None, reason: str
) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(SimInputError) as caught:
        load_profile(path)
    assert caught.value.file == str(path)
    assert caught.value.line == line
    assert reason in caught.value.reason
    where = str(path) if line is None else f"{path}:{line}"
    assert str(caught.value) == f"{where}: {caught.value.reason}"


def test_a_batch_size_the_profile_lacks_is_an_error_naming_the_profile(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, "p.csv", GOOD))
    with pytest.raises(SimInputError, match=r"p.csv: profile 'p' has no global batch size 32"):
        profile.throughput(32, 1)


def test_missing_files_and_empty_folders_are_errors(tmp_path: Path) -> None:
    with pytest.raises(SimInputError, match="cannot read"):
        load_profile(tmp_path / "absent.csv")
    with pytest.raises(SimInputError, match=r"no \*.csv profile"):
        load_profiles(tmp_path)


def test_the_bundled_profiles_are_elasticflows_seven() -> None:
    profiles = bundled_profiles()
    assert sorted(profiles) == [
        "bert",
        "deepspeech2",
        "gpt2",
        "inception3",
        "resnet50",
        "resnet50_cifar10",
        "vgg16",
    ]
    assert profiles["resnet50"].throughput(128, 8) == pytest.approx(16.53414011075494)
    assert profiles["deepspeech2"].throughput(32, 64) == profiles["deepspeech2"].throughput(32, 32)
    assert profiles["resnet50_cifar10"].throughput(64, 16) == 0.0


@pytest.fixture
def pollux_trace(tmp_path: Path) -> Path:
    folder = tmp_path / "toy"
    folder.mkdir()
    write(
        folder,
        "placements.csv",
        "placement,local_bsz,step_time,sync_time\n"
        "1,4,1.0,0.0\n1,8,1.5,0.0\n"
        "2,4,1.2,0.2\n2,8,1.7,0.2\n",
    )
    write(
        folder,
        "scalability.csv",
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,24,4,2.0,1.0\n6,24,8,2.5,1.0\n",
    )
    write(
        folder,
        "validation-8.csv",
        "progress,iteration,metric,grad_sqr,grad_var\n1,50,0,1,1\n2,100,0,1,1\n",
    )
    write(
        folder,
        "validation-16.csv",
        "progress,iteration,metric,grad_sqr,grad_var\n1,30,0,1,1\n2,60,0,1,1\n",
    )
    return folder


def test_a_pollux_trace_becomes_a_profile_of_iterations_per_second(pollux_trace: Path) -> None:
    profile = load_pollux_profile(pollux_trace, batch_sizes=[4, 8, 12, 16, 96])
    assert profile.name == "toy"
    assert profile.gpu_counts == (1, 2, 24)  # only the packed placements that were measured
    rates = {row.batch_size: row.rates for row in profile.rows}
    assert rates[8] == pytest.approx((1 / 1.5, 1 / 1.2, 0.0))  # 8/24 < the smallest local batch
    assert rates[12][1] == pytest.approx(1 / 1.45)  # local 6: step interpolated
    assert rates[16][0] == pytest.approx(1 / 3.0)  # local 16 > 8: one accumulation step
    assert rates[4] == pytest.approx((1 / 1.0, 0.0, 0.0))  # local 2 on 2 GPUs is below 4
    assert rates[96][2] == pytest.approx(1 / 2.0)  # from scalability.csv: 6 nodes, 24 GPUs


def test_pollux_defaults_to_the_validated_batch_sizes(pollux_trace: Path) -> None:
    assert load_pollux_profile(pollux_trace).batch_sizes == (8, 16)
    assert sorted(load_pollux_profiles(pollux_trace.parent)) == ["toy"]


def test_pollux_iterations_come_from_the_last_epoch_interpolated(pollux_trace: Path) -> None:
    assert pollux_iterations(pollux_trace, batch_size=8) == 100
    assert pollux_iterations(pollux_trace, batch_size=12) == 80
    with pytest.raises(SimInputError, match="batch size 32 is outside the validated ones"):
        pollux_iterations(pollux_trace, batch_size=32)


def test_a_broken_pollux_trace_names_file_and_line(pollux_trace: Path) -> None:
    path = pollux_trace / "placements.csv"
    path.write_text("placement,local_bsz,step_time,sync_time\n1,4,1.0,0.0\n1,8,fast,0\n")
    with pytest.raises(SimInputError) as caught:
        load_pollux_profile(pollux_trace)
    assert (caught.value.file, caught.value.line) == (str(path), 3)
    path.write_text("placement,local_bsz,step_time,sync_time\n1,4,1.0,2.0\n")
    with pytest.raises(SimInputError, match=r"placements.csv:2: need 0 <= sync_time <= step_time"):
        load_pollux_profile(pollux_trace)
    path.write_text("placement,local,step_time,sync_time\n")
    with pytest.raises(SimInputError, match=r"placements.csv:1: header must be"):
        load_pollux_profile(pollux_trace)
