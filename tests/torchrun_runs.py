"""What runs under torchrun share: its command, its environment, a free port, a process's
descendants, and the abort torch's CPU workers sometimes end with."""

from __future__ import annotations

import os
import socket
import sys

from tests.pty_session import children_of

# EXIT_ABORT: with DDP still holding the group when the interpreter exits, a rank of this job
# aborts after its last line ("terminate called without an active exception", SIGABRT) in
# about one torchrun run in ten on torch 2.13 CPU, with no backstep in the process (measured
# 2026-11-24: 3 of 30 and 3 of 30 runs; with the model dropped before the group, 0 of 40).
# CI still met it once, in the plain reference run (2026-11-26): that run is tried again.
EXIT_ABORT = "terminate called without an active exception"

# torchrun's own setting for every worker; the plain reference runs under it too
ENV = {**os.environ, "PYTHONWARNINGS": "ignore::UserWarning", "OMP_NUM_THREADS": "1"}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += children
    return found
