"""Training objects in reference cycles are freed at exit before the interpreter finalizes."""

import subprocess
import sys

import pytest

SCRIPT = """
import sys
from autoscaler.training.teardown import collect_garbage_at_exit

class Holder:  # stands for DDP and its comm hook: a cycle only the collector frees
    def __del__(self):
        print("finalizing" if sys.is_finalizing() else "alive", flush=True)

cycle = Holder()
cycle.me = cycle
del cycle
if {register}:
    collect_garbage_at_exit()
    collect_garbage_at_exit()
"""


@pytest.mark.parametrize(
    ("register", "freed"), [(True, "alive"), (False, "finalizing")], ids=["registered", "not"]
)
def test_a_cycle_is_freed_while_the_interpreter_is_whole(register: bool, freed: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(register=register)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == [freed]
