"""Run a Python function on N real OneFlow ranks and collect each rank's JSON result.

Every run gets its own free --master_port (other jobs may hold OneFlow's default 29500),
its own working directory (OneFlow writes ./log there) and a timeout; the launcher and
all ranks live in one process group that is killed when the run ends, however it ends.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


LAUNCHED_GROUPS = set()  # process groups this interpreter started, checked at the end of the suite


def _live_members(pgid: int) -> List[int]:
    """PIDs in process group `pgid` that are not zombies (killed ranks wait for init to reap
    them)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def alive_groups():
    """Those of our launched process groups that still have a live (non-zombie) process."""
    return [pgid for pgid in sorted(LAUNCHED_GROUPS) if _live_members(pgid)]


class RankFailure(AssertionError):
    """A rank failed or the run timed out; the message holds the failing rank's stderr."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, the launcher's whole group, until none of it is left running."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + 5
        while time.time() < deadline and _live_members(proc.pid):
            time.sleep(0.1)
        if not _live_members(proc.pid):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _tail(path: str, limit: int = 6000) -> str:
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return "(no stderr file)"
    return text[-limit:]


def run_on_ranks(
    target: str,
    nproc: int,
    timeout: float = 240,
    env: Optional[Dict[str, str]] = None,
    paths: Sequence[str] = (),
    **kwargs: Any,
) -> List[Any]:
    """Call `module:function(**kwargs)` (module importable from tests/ or `paths`) on `nproc` ranks.

    Returns the per-rank results in rank order. Raises RankFailure with the stderr of the
    first rank that failed, or of every rank on a timeout.
    """
    with tempfile.TemporaryDirectory(prefix="autoddl-ranks-") as out_dir:
        cmd = [
            sys.executable,
            "-m",
            "oneflow.distributed.launch",
            "--nproc_per_node",
            str(nproc),
            "--master_port",
            str(free_port()),
            os.path.join(HERE, "rank_main.py"),
            out_dir,
            target,
            json.dumps(kwargs),
        ]
        run_env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([*paths, ROOT, os.path.join(ROOT, "examples"), HERE]),
        )
        run_env.update(env or {})
        with open(os.path.join(out_dir, "launcher.log"), "w") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=out_dir,
                env=run_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            LAUNCHED_GROUPS.add(proc.pid)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                _kill_group(proc)
        results = []
        for rank in range(nproc):
            path = os.path.join(out_dir, f"rank{rank}.json")
            if not os.path.exists(path):
                what = (
                    f"timed out after {timeout:.0f} s"
                    if code is None
                    else f"exited with code {code}"
                )
                raise RankFailure(
                    f"{target} on {nproc} ranks {what}; rank {rank} gave no result. "
                    f"Its stderr:\n{_tail(os.path.join(out_dir, f'rank{rank}.err'))}\n"
                    f"launcher:\n{_tail(os.path.join(out_dir, 'launcher.log'), 2000)}"
                )
            with open(path) as f:
                results.append(json.load(f))
        if code != 0:
            raise RankFailure(
                f"{target} on {nproc} ranks: launcher exited with {code}\n"
                f"{_tail(os.path.join(out_dir, 'launcher.log'))}"
            )
        return results
