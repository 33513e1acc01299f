"""The node agent's container runtime: `python -I -S container_init.py HOSTNAME CWD ARGV...`.

Runs ARGV as the init (PID 1) of a new PID namespace, with HOSTNAME in a new UTS namespace, as
runc does for a container: when the init exits (it ends, crashes or is SIGKILLed), the kernel
kills every other process of the namespace, whatever session or process group it moved to.

This process stays outside the namespace as the container's handle: it forwards the signals it
gets to the init (the kernel delivers them only if the init handles them, as in a real container;
SIGKILL always), and exits as the init did, re-raising its signal. If this process is SIGKILLed,
the init gets SIGKILL too (PR_SET_PDEATHSIG), so no container outlives its handle.

Standard library only, and no site packages (`-S`), so it starts at once with any interpreter.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import sys

CLONE_NEWUTS = 0x04000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _run_init(argv: list[str], cwd: str, parent_alive: int) -> None:
    """In the child, PID 1 of the new namespace: die with the handle, then become the command."""
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    if select.select([parent_alive], [], [], 0)[0]:  # EOF: the handle died before prctl
        os._exit(137)
    os.close(parent_alive)
    try:
        os.chdir(cwd)
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"container_init: {argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def main(hostname: str, cwd: str, argv: list[str]) -> None:
    _check(libc.unshare(CLONE_NEWPID | CLONE_NEWUTS), "unshare")
    socket.sethostname(hostname)
    read_end, write_end = os.pipe()  # the child sees EOF once this process is gone
    child = os.fork()
    if child == 0:
        os.close(write_end)
        _run_init(argv, cwd, read_end)
    os.close(read_end)
    for sig in FORWARDED:
        signal.signal(sig, lambda received, _frame: os.kill(child, received))
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is not to terminate
    os._exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
