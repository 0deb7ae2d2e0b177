"""Start a module on N local OneFlow ranks, on a free port (other jobs may hold 29500)."""

import socket
import subprocess
import sys
from typing import List


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_module(module: str, nproc: int, args: List[str]) -> int:
    cmd = [
        sys.executable,
        "-m",
        "oneflow.distributed.launch",
        "--nproc_per_node",
        str(nproc),
        "--master_port",
        str(free_port()),
        "-m",
        module,
    ] + args
    return subprocess.call(cmd)
