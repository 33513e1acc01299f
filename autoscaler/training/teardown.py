"""Training objects freed while the interpreter is still whole.

DDP with a Python comm hook, and torchft's manager with its state callbacks, form reference
cycles that hold a gloo process group, so they are freed only by the garbage collector. Left to
the interpreter's finalization, a gloo worker thread that completes a future of theirs then
takes the GIL of a dying interpreter and the process aborts ("terminate called without an
active exception"): a finished job's container exits 134 and is restarted. Collecting once at
exit, before finalization, frees them first (`tests/integration/test_goodput_gradients.py` runs
such processes; `tests/unit/test_teardown.py` checks the order).
"""

import atexit
import functools
import gc


@functools.cache
def collect_garbage_at_exit() -> None:
    """Registers one `gc.collect()` at interpreter exit (once, however often it is called)."""
    atexit.register(gc.collect)
