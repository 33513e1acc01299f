"""The notebooks: committed without outputs, and each one runs top to bottom in a fresh kernel."""

import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import NATIVE_KERNEL_NAME
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[2] / "notebooks").glob("*.ipynb"))


def read(path: Path) -> dict[str, object]:
    return dict(nbformat.read(path, as_version=4))


# What each notebook must print, and how many plots it must draw.
EXPECTED = {
    "decision-log-analysis.ipynb": (("records", "written:", "OptimalAllocation"), 3),
    "policy-comparison.ipynb": (
        ("static", "pollux-style", "global-optimizer", "LP bound", "each job alone"),
        3,
    ),
}


def test_every_notebook_is_checked() -> None:
    assert [path.name for path in NOTEBOOKS] == sorted(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_notebooks_have_no_outputs(path: Path) -> None:
    notebook = read(path)
    for cell in notebook["cells"]:  # type: ignore[attr-defined]
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name}: strip the outputs before committing"
            assert cell["execution_count"] is None, f"{path.name}: strip the execution counts"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebooks_run_in_a_kernel_of_this_python(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core warns without it
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import sys\nprint('kernel:', sys.executable)"))
    NotebookClient(
        notebook,
        timeout=60,
        kernel_name=NATIVE_KERNEL_NAME,  # ipykernel's spec: jupyter_client runs it with this Python
        resources={"metadata": {"path": path.parent}},
    ).execute()
    outputs = [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    printed, plots = EXPECTED[path.name]
    assert all(words in text for words in printed), text
    assert f"kernel: {sys.executable}" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == plots
