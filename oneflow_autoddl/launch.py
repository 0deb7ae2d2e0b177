"""Start OneFlow ranks on this machine: a module, or one function whose JSON each rank returns.

Every launch takes a free --master_port (other jobs may hold OneFlow's default 29500). A
function run by `run_on_ranks` gets its own working directory (OneFlow writes ./log there)
and a timeout, and is done once every rank has written its result; the launcher and all ranks
live in one process group that is killed when the run ends, however it ends, so no rank
outlives its caller.

    python -m oneflow_autoddl.launch OUT_DIR module:function JSON_KWARGS

is the entry point of one such rank (run by the launcher, not by hand): it calls the function
with the keyword arguments and writes its result to OUT_DIR/rank<r>.json, its stderr to
OUT_DIR/rank<r>.err.
"""

import faulthandler
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from typing import IO, Any, Dict, List, Optional, Sequence

LAUNCHED_GROUPS = set()  # process groups this interpreter started (see alive_groups)


class RankFailure(AssertionError):
    """A rank failed or the run timed out; the message holds the failing rank's stderr."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher(
    nproc: int,
    port: Optional[int] = None,
    nnodes: int = 1,
    node_rank: int = 0,
    master_addr: Optional[str] = None,
) -> List[str]:
    """The command line that starts `nproc` ranks on this node (append the script or `-m
    module`); with `nnodes` > 1, this node's ranks of a multi-node launch, whose rank 0 listens
    on `master_addr`:`port` (the same on every node). It runs OneFlow's launcher (the file of
    `oneflow.distributed.launch`) as a script: the same program as `python -m
    oneflow.distributed.launch`, without importing the oneflow package into the launcher process
    first, which only starts the ranks and would spend more than a second on that import."""
    cmd = [sys.executable, _oneflow_launcher(), "--nproc_per_node", str(nproc)]
    if nnodes > 1:
        if master_addr is None or port is None:
            raise ValueError("a multi-node launch needs node 0's address and port on every node")
        cmd += ["--nnodes", str(nnodes), "--node_rank", str(node_rank)]
        cmd += ["--master_addr", master_addr]
    return cmd + ["--master_port", str(port or free_port())]


def _oneflow_launcher() -> str:
    """The path of OneFlow's `oneflow/distributed/launch.py`, found without importing oneflow."""
    spec = importlib.util.find_spec("oneflow")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("OneFlow is not installed here: ci/bootstrap.sh makes an environment")
    return os.path.join(list(spec.submodule_search_locations)[0], "distributed", "launch.py")


def run_module(module: str, nproc: int, args: List[str], **multinode: Any) -> int:
    """Run `python -m module args` on `nproc` ranks of this node in the foreground (`multinode`:
    launcher's nnodes, node_rank, master_addr and port); its exit code."""
    return subprocess.call(launcher(nproc, **multinode) + ["-m", module] + args)


def run_script(
    args: Sequence[str], nproc: int, timeout: float = 600, cwd: Optional[str] = None
) -> str:
    """Run `python ARGS` (a script and its flags, or `-m module ...`) on `nproc` local ranks as
    a user would; returns what it printed. RankFailure, with the output's tail, when it fails or
    runs past `timeout`."""
    with tempfile.TemporaryFile("w+") as log:
        code = wait_group(start_group(launcher(nproc) + list(args), log, cwd=cwd), timeout)
        log.seek(0)
        output = log.read()
    if code != 0:
        what = f"timed out after {timeout:.0f} s" if code is None else f"exited with {code}"
        raise RankFailure(f"{' '.join(args)} on {nproc} ranks {what}:\n{output[-6000:]}")
    return output


def start_group(
    cmd: Sequence[str],
    log: IO,
    cwd: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    cores: Optional[Sequence[int]] = None,
) -> subprocess.Popen:
    """`cmd` started in a process group of its own, its output to `log`, registered in
    LAUNCHED_GROUPS: kill_group can end it and everything it started, and tests can check that
    nothing of it is left. With `cores`, it and everything it starts run on those CPU cores
    only."""
    pin = None if cores is None else (lambda: os.sched_setaffinity(0, list(cores)))
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=pin,
    )
    LAUNCHED_GROUPS.add(proc.pid)
    return proc


def wait_group(proc: subprocess.Popen, timeout: float) -> Optional[int]:
    """The exit code of `proc` (None past `timeout` seconds); its whole group killed after."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        kill_group(proc)


def _live_members(pgid: int) -> List[int]:
    """PIDs in process group `pgid` that are not zombies (killed ranks wait to be reaped)."""
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


def alive_groups() -> List[int]:
    """Those of the process groups this interpreter launched that still have a live process."""
    return [pgid for pgid in sorted(LAUNCHED_GROUPS) if _live_members(pgid)]


def kill_group(proc: subprocess.Popen) -> None:
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
            return f.read()[-limit:]
    except FileNotFoundError:
        return "(no stderr file)"


def run_on_ranks(
    target: str,
    nproc: int,
    timeout: float = 240,
    env: Optional[Dict[str, str]] = None,
    paths: Optional[Sequence[str]] = None,
    **kwargs: Any,
) -> List[Any]:
    """Call `module:function(**kwargs)` on `nproc` local ranks; the results in rank order.

    The ranks import `module` from `paths` (default: the caller's working directory), which
    go first on their PYTHONPATH. Raises RankFailure with the stderr of the first rank that
    gave no result, or of every rank on a timeout.
    """
    roots = [os.path.abspath(p) for p in (paths or [os.getcwd()])]
    with tempfile.TemporaryDirectory(prefix="autoddl-ranks-") as out_dir:
        cmd = launcher(nproc) + ["-m", __name__, out_dir, target, json.dumps(kwargs)]
        pythonpath = os.pathsep.join(roots + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        run_env = dict(os.environ, PYTHONPATH=pythonpath, **(env or {}))
        margin = min(STACKS_MARGIN_S, timeout / 4)
        run_env[STACKS_AT_ENV] = repr(time.time() + timeout - margin)
        with open(os.path.join(out_dir, "launcher.log"), "w") as log:
            code = wait_results(
                start_group(cmd, log, cwd=out_dir, env=run_env), out_dir, nproc, timeout
            )
        return collect_results(out_dir, target, nproc, code, timeout)


RESULTS_POLL_S = 0.05  # how often wait_results looks for the ranks' result files


def wait_results(proc: subprocess.Popen, out_dir: str, nproc: int, timeout: float) -> Optional[int]:
    """The launch's exit code; 0 as soon as every rank has written OUT_DIR/rank<r>.json, without
    waiting for the ranks' OneFlow teardown and the launcher's once-a-second poll of them (1.7 s
    a launch of 2 or 4 ranks here); None past `timeout`. Its whole group killed after."""
    deadline = time.monotonic() + timeout
    paths = [os.path.join(out_dir, f"rank{r}.json") for r in range(nproc)]
    try:
        while True:
            code = proc.poll()
            if code is not None:
                return code
            if all(os.path.exists(p) for p in paths):
                return 0
            if time.monotonic() > deadline:
                return None
            time.sleep(RESULTS_POLL_S)
    finally:
        kill_group(proc)


def collect_results(
    out_dir: str, target: str, nproc: int, code: Optional[int], timeout: float
) -> List[Any]:
    """Each rank's result from OUT_DIR/rank<r>.json (rank_main), or RankFailure with the stderr
    of the first rank that gave none (of each, on a timeout); `code` is the launch's (None: it
    timed out)."""
    missing = [
        r for r in range(nproc) if not os.path.exists(os.path.join(out_dir, f"rank{r}.json"))
    ]
    if missing:
        what = f"timed out after {timeout:.0f} s" if code is None else f"exited with {code}"
        shown = missing if code is None else missing[:1]  # a hang needs every waiting rank
        each = 6000 // len(shown)
        stderr = "".join(
            f"rank {r}'s stderr:\n{_tail(os.path.join(out_dir, f'rank{r}.err'), each)}\n"
            for r in shown
        )
        raise RankFailure(
            f"{target} on {nproc} ranks {what}; rank(s) {missing} gave no result.\n{stderr}"
            f"launcher:\n{_tail(os.path.join(out_dir, 'launcher.log'), 2000)}"
        )
    results = []
    for rank in range(nproc):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
            results.append(json.load(f))
    if code != 0:
        raise RankFailure(
            f"{target} on {nproc} ranks: launcher exited with {code}\n"
            f"{_tail(os.path.join(out_dir, 'launcher.log'))}"
        )
    return results


STACKS_AT_ENV = "AUTODDL_RANK_STACKS_AT"  # when (time.time()) a rank still running shows stacks
STACKS_MARGIN_S = 5.0  # how long before the run's timeout, at most

RANK0_WAIT_S = 120.0  # how long a rank waits for rank 0's control server before going on


def wait_for_rank0(deadline_s: float = RANK0_WAIT_S) -> None:
    """Return once rank 0's control server (MASTER_ADDR:MASTER_PORT) accepts connections, or
    after `deadline_s`. OneFlow 0.9.0 starts every rank at once, and a rank whose first call
    finds rank 0 not listening yet sleeps 10 s before its next (rpc_client.cpp), so each launch
    cost 10 s more than it needed. Importing oneflow_autoddl before OneFlow calls this as OneFlow
    is imported, on every rank of any launch (a rank of `run_on_ranks` too)."""
    if not _a_later_rank():
        return
    addr, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, int(port)), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.05)


def _a_later_rank() -> bool:
    """Whether this process is a rank other than 0 of a launch of several: OneFlow's launcher
    sets RANK, WORLD_SIZE and MASTER_ADDR:MASTER_PORT; a lone process that imported OneFlow
    holds RANK -1 and WORLD_SIZE 1, and the processes it starts inherit them."""
    env = os.environ
    if not env.get("MASTER_ADDR") or not env.get("MASTER_PORT"):
        return False
    try:
        return int(env.get("RANK", "0")) > 0 and int(env.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def _rank_main(out_dir: str, target: str, kwargs: Dict[str, Any]) -> int:
    """One rank of `run_on_ranks`: stderr to rank<r>.err, the result to rank<r>.json. A rank
    still running shortly before the run's timeout writes every thread's Python stack to its
    stderr, so that a hang names where each rank waits."""
    rank = int(os.environ.get("RANK", "0"))
    err = open(os.path.join(out_dir, f"rank{rank}.err"), "w")
    os.dup2(err.fileno(), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    stacks_at = os.environ.get(STACKS_AT_ENV)
    if stacks_at:
        faulthandler.dump_traceback_later(max(0.1, float(stacks_at) - time.time()), file=sys.stderr)
    module_name, func_name = target.split(":")
    try:
        result = getattr(importlib.import_module(module_name), func_name)(**kwargs)
    except BaseException:
        traceback.print_exc()
        return 1
    tmp = os.path.join(out_dir, f"rank{rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.path.join(out_dir, f"rank{rank}.json"))
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
