"""An emulated cluster on this machine: one network namespace per node, a rate-limited link each.

    python -m benchmarks.netcluster up --nodes 2 --rate 200mbit     # make the nodes and links
    python -m benchmarks.netcluster status                          # what of ours exists
    python -m benchmarks.netcluster launch --nproc-per-node 2 examples/gpt.py --mesh 2x2
    python -m benchmarks.netcluster exec -- python -m oneflow_autoddl calibrate --nnodes {nodes} \\
        --node-rank {node} --nproc 2 --master-addr {master_addr} --master-port {master_port}
    python -m benchmarks.netcluster down                            # kill what runs there, remove

Node k is the namespace `autoddl-NAME-nK` with one interface, `eth0` at 10.213.0.(k+1)/24,
whose peer is a port of a bridge in the namespace `autoddl-NAME-sw` (the switch). A token
bucket (`tc tbf`, this kernel has no netem) limits each end to the rate: what a node sends
(its eth0) and what it receives (its port on the switch). A node's ranks talk to each other over
their namespace's loopback, at this machine's speed; to other nodes over the limited link. What
runs on a node runs on its own share of this machine's cores (`node_cores`), as a node's ranks
would on their own machine: with every rank free to run on every core, runs of steps stalled
across nodes that never did on one (docs/results.md, Across nodes).
Everything is made inside those namespaces (both ends of each veth are created there), so
nothing outside them changes, and `down` deletes them, which deletes their links.

`launch` runs OneFlow's launcher in every node's namespace at once (`--nnodes N --node_rank K
--master_addr` node 0's address: loopback does not cross namespaces), `exec` any command with
{node}, {nodes}, {master_addr} and {master_port} filled in per node; both with a timeout, and
every process left in the namespaces is killed when the command ends, however it ends.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from tabulate import tabulate

from oneflow_autoddl.launch import (
    RankFailure,
    collect_results,
    free_port,
    kill_group,
    launcher,
    start_group,
)

PREFIX = "autoddl-"
DEFAULT_NAME = "net"
SUBNET = "10.213.0"
DEVICE = "eth0"  # a node's link, inside its namespace
# tc tbf as checked here (../shared/DESIGN.md, "Emulated nodes"): 195 Mbit/s measured at 200mbit
BURST, QUEUE_LATENCY = "64kb", "50ms"
# bytes of Ethernet, IPv4 and TCP headers (with the timestamp option Linux sends) per packet
HEADER_BYTES = 14 + 20 + 32


class NetClusterError(RuntimeError):
    """The emulated cluster cannot be made or used here; the message says why and what to do."""


def unavailable() -> Optional[str]:
    """Why namespaces cannot be made here (None if they can): not root, or no `ip` / `tc`."""
    if os.geteuid() != 0:
        return "emulated nodes need root (network namespaces and tc); run as root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"emulated nodes need {' and '.join(missing)} (iproute2); install it"
    return None


@dataclass(frozen=True)
class NetCluster:
    name: str
    nodes: int
    rate: str  # tc's spelling, e.g. 200mbit

    def namespace(self, node: int) -> str:
        return f"{PREFIX}{self.name}-n{node}"

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.name}-sw"

    @property
    def namespaces(self) -> List[str]:
        return [self.namespace(k) for k in range(self.nodes)] + [self.switch]

    def address(self, node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    @property
    def master_addr(self) -> str:
        return self.address(0)


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise NetClusterError(f"`{' '.join(cmd)}` failed: {done.stderr.strip() or done.stdout}")
    return done.stdout


def _our_namespaces() -> List[str]:
    if unavailable():
        return []
    names = [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(PREFIX))


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z0-9]{1,24}", name):
        raise NetClusterError(f"cluster name {name!r}: use 1 to 24 lower-case letters and digits")


def _check_rate(rate: str) -> None:
    if not re.fullmatch(r"[0-9.]+(bit|kbit|mbit|gbit)", rate):
        raise NetClusterError(f"rate {rate!r}: give it as tc does, e.g. 200mbit or 1gbit")


def up(nodes: int, rate: str, name: str = DEFAULT_NAME) -> NetCluster:
    """Make `nodes` namespaces joined through a switch, each link limited to `rate` each way.

    Refuses a name already in use (down it first). On any failure, what was made is removed."""
    reason = unavailable()
    if reason:
        raise NetClusterError(reason)
    _check_name(name)
    _check_rate(rate)
    if not 2 <= nodes <= 200:
        raise NetClusterError(f"--nodes {nodes}: an emulated cluster has 2 to 200 nodes")
    cluster = NetCluster(name, nodes, rate)
    taken = [n for n in _our_namespaces() if n.startswith(f"{PREFIX}{name}-")]
    if taken:
        raise NetClusterError(
            f"emulated cluster {name!r} is up already ({', '.join(taken)}): "
            f"`python -m benchmarks.netcluster down --name {name}` first, or use another --name"
        )
    try:
        _make(cluster)
    except BaseException:
        down(name)
        raise
    return cluster


def _make(c: NetCluster) -> None:
    sw = c.switch
    _run("ip", "netns", "add", sw)
    _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
    for k in range(c.nodes):
        ns, port = c.namespace(k), f"p{k}"
        _run("ip", "netns", "add", ns)
        _run(
            "ip", "link", "add", DEVICE, "netns", ns, "type", "veth", "peer", "name", port,
            "netns", sw,
        )  # fmt: skip
        _run("ip", "-n", sw, "link", "set", port, "master", "br0")
        _run("ip", "-n", ns, "addr", "add", f"{c.address(k)}/24", "dev", DEVICE)
        for netns, dev in ((ns, "lo"), (ns, DEVICE), (sw, port)):
            _run("ip", "-n", netns, "link", "set", dev, "up")
        for netns, dev in ((ns, DEVICE), (sw, port)):
            _run(
                "ip", "netns", "exec", netns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                "rate", c.rate, "burst", BURST, "latency", QUEUE_LATENCY,
            )  # fmt: skip
    _run("ip", "-n", sw, "link", "set", "br0", "up")


def find(name: str = DEFAULT_NAME) -> NetCluster:
    """The emulated cluster `name` as it is up now (its nodes and rate read from the kernel)."""
    spaces = [n for n in _our_namespaces() if n.startswith(f"{PREFIX}{name}-n")]
    if not spaces:
        raise NetClusterError(
            f"no emulated cluster {name!r} is up: `python -m benchmarks.netcluster up --nodes 2 "
            f"--rate 200mbit --name {name}` first"
        )
    qdisc = _run("ip", "netns", "exec", spaces[0], "tc", "qdisc", "show", "dev", DEVICE)
    rate = re.search(r"rate (\S+)", qdisc)
    return NetCluster(name, len(spaces), _tc_rate(rate.group(1)) if rate else "?")


def _tc_rate(shown: str) -> str:
    """tc prints 200Mbit; it is given as 200mbit."""
    return shown.lower()


def kill_namespace_processes(namespace: str) -> None:
    """SIGTERM, then SIGKILL, every process in `namespace` (only ours run there) until none is."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _pids(namespace)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.time() + 5
        while pids and time.time() < deadline:
            time.sleep(0.1)
            pids = _pids(namespace)
        if not pids:
            return


def _pids(namespace: str) -> List[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split() if p.isdigit() and _running(int(p))]


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def down(name: Optional[str] = DEFAULT_NAME) -> List[str]:
    """Kill every process in the namespaces of cluster `name` (None: of every cluster of ours)
    and delete them, with their links. Returns the namespaces deleted."""
    prefix = PREFIX if name is None else f"{PREFIX}{name}-"
    gone = []
    for ns in _our_namespaces():
        if ns.startswith(prefix):
            kill_namespace_processes(ns)
            _run("ip", "netns", "del", ns)
            gone.append(ns)
    return gone


@contextlib.contextmanager
def emulated(nodes: int, rate: str, name: Optional[str] = None) -> Iterator[NetCluster]:
    """An emulated cluster for the block, removed after it however it ends (SIGTERM included).
    The default name is unique to this process, so that runs beside each other never meet."""
    name = name or f"p{os.getpid()}"
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield up(nodes, rate, name)
    finally:
        down(name)
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def node_command(cluster: NetCluster, node: int, nproc_per_node: int, port: int) -> List[str]:
    """OneFlow's launcher for node `node`'s ranks, run in its namespace (append the script)."""
    return ["ip", "netns", "exec", cluster.namespace(node)] + launcher(
        nproc_per_node,
        port,
        nnodes=cluster.nodes,
        node_rank=node,
        master_addr=cluster.master_addr,
    )


def node_cores(nodes: int, cores: Optional[Sequence[int]] = None) -> List[List[int]]:
    """The cores each node runs on: `cores` (default: those this process may use) split into
    `nodes` runs of consecutive ones, as even as they go; where there are more nodes than
    cores, node k gets core k modulo their number."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    if nodes > len(cores):
        return [[cores[k % len(cores)]] for k in range(nodes)]
    return [cores[k * len(cores) // nodes : (k + 1) * len(cores) // nodes] for k in range(nodes)]


def run_per_node(
    cluster: NetCluster,
    commands: Sequence[List[str]],
    timeout: float,
    cwd: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
) -> List[Tuple[Optional[int], str]]:
    """Run commands[k] in node k's namespace on node k's cores (node_cores), all at once; (exit
    code or None on a timeout, output) per node. When one fails the others are given a few
    seconds, then everything left in the namespaces is killed: a rank whose peer died would
    wait for it forever."""
    procs, logs = [], []
    cores = node_cores(cluster.nodes)
    try:
        for node, cmd in enumerate(commands):
            log = tempfile.TemporaryFile("w+")
            logs.append(log)
            full = cmd if cmd[:3] == ["ip", "netns", "exec"] else _in(cluster, node, cmd)
            procs.append(start_group(full, log, cwd=cwd, env=env, cores=cores[node]))
        codes = _wait_all(procs, timeout)
    finally:
        for proc in procs:
            kill_group(proc)
        for ns in cluster.namespaces:
            kill_namespace_processes(ns)
    out = []
    for code, log in zip(codes, logs):
        log.seek(0)
        out.append((code, log.read()))
        log.close()
    return out


def _in(cluster: NetCluster, node: int, cmd: List[str]) -> List[str]:
    return ["ip", "netns", "exec", cluster.namespace(node)] + list(cmd)


# what marks a rank's failure in its output (OneFlow's fatal checks, Python's exceptions)
ERRORS = re.compile(r"Check failed|Error|SystemExit|calibrate could not|Traceback")
GRACE_S = 20  # how long the other nodes may take to notice one has failed before they are killed


def _wait_all(procs: List[subprocess.Popen], timeout: float) -> List[Optional[int]]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return codes
        if any(c not in (None, 0) for c in codes):
            deadline = min(deadline, time.time() + GRACE_S)
        time.sleep(0.2)
    return [p.poll() for p in procs]


def launch(
    cluster: NetCluster,
    nproc_per_node: int,
    args: Sequence[str],
    timeout: float = 600,
    cwd: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
) -> List[str]:
    """`python -m oneflow.distributed.launch ... ARGS` on every node (a script and its flags, or
    `-m module ...`), with `cwd` (default: this one, the repository's root) first on the ranks'
    PYTHONPATH, so they import its oneflow_autoddl; each node's output. RankFailure, with the
    outputs' tails, when a node fails or the run outlasts `timeout`."""
    port = free_port()
    commands = [
        node_command(cluster, k, nproc_per_node, port) + list(args) for k in range(cluster.nodes)
    ]
    env = _with_path(env or dict(os.environ), [cwd or os.getcwd()])
    return check(
        cluster, " ".join(args), run_per_node(cluster, commands, timeout, cwd, env), timeout
    )


def _with_path(env: Dict[str, str], roots: Sequence[str]) -> Dict[str, str]:
    paths = [os.path.abspath(p) for p in roots] + [env.get("PYTHONPATH", "")]
    return dict(env, PYTHONPATH=os.pathsep.join(paths).rstrip(os.pathsep))


def check(cluster, what: str, results, timeout: float) -> List[str]:
    if all(code == 0 for code, _ in results):
        return [output for _, output in results]
    lines = []
    for node, (code, output) in enumerate(results):
        status = f"timed out after {timeout:.0f} s" if code is None else f"exited with {code}"
        first = [line for line in output.splitlines() if ERRORS.search(line)][:8]
        lines.append(
            f"node {node} ({cluster.namespace(node)}) {status}; first errors:\n"
            + "\n".join(first)
            + f"\nits output's end:\n{output[-3000:]}"
        )
    raise RankFailure(f"{what} on {cluster.nodes} emulated nodes:\n" + "\n".join(lines))


def run_on_nodes(
    net: NetCluster,
    target: str,
    nproc_per_node: int,
    timeout: float = 600,
    paths: Optional[Sequence[str]] = None,
    **kwargs: Any,
) -> List[Any]:
    """oneflow_autoddl.launch.run_on_ranks across the emulated nodes: `module:function(**kwargs)`
    on nproc_per_node ranks in every node; the results in rank order (node-major)."""
    with tempfile.TemporaryDirectory(prefix="autoddl-nodes-") as out_dir:
        env = _with_path(dict(os.environ), paths or [os.getcwd()])
        port = free_port()
        rank_args = ["-m", "oneflow_autoddl.launch", out_dir, target, json.dumps(kwargs)]
        commands = [
            node_command(net, k, nproc_per_node, port) + rank_args for k in range(net.nodes)
        ]
        results = run_per_node(net, commands, timeout, cwd=out_dir, env=env)
        codes = [code for code, _ in results]
        code = 0 if all(c == 0 for c in codes) else (None if None in codes else max(codes))
        log = "\n".join(f"node {k}:\n{out[-2000:]}" for k, (_, out) in enumerate(results))
        with open(os.path.join(out_dir, "launcher.log"), "w") as f:
            f.write(log)
        return collect_results(out_dir, target, net.nodes * nproc_per_node, code, timeout)


def fill(template: Sequence[str], cluster: NetCluster, node: int, port: int) -> List[str]:
    """A per-node command: {node}, {nodes}, {master_addr} and {master_port} filled in."""
    values = {
        "node": node,
        "nodes": cluster.nodes,
        "master_addr": cluster.master_addr,
        "master_port": port,
    }
    return [part.format(**values) for part in template]


def link_counters(device: str = DEVICE) -> Dict[str, int]:
    """This namespace's counters of `device` (tx/rx bytes and packets), read by a rank inside it.
    `ip netns exec` mounts the namespace's own /sys."""
    base = f"/sys/class/net/{device}/statistics"
    return {
        key: int(open(os.path.join(base, key)).read())
        for key in ("tx_bytes", "tx_packets", "rx_bytes", "rx_packets")
    }


def tcp_payload(before: Dict[str, int], after: Dict[str, int]) -> int:
    """TCP payload bytes a link sent between two link_counters: tx bytes less HEADER_BYTES a packet
    (a socket test of 41,943,040 bytes here read 43,670,310 tx bytes in 26,171 packets: 16 bytes
    apart after the headers, the connection's own)."""
    return (after["tx_bytes"] - before["tx_bytes"]) - HEADER_BYTES * (
        after["tx_packets"] - before["tx_packets"]
    )


def status() -> List[Dict[str, Any]]:
    """Per namespace of ours: its cluster, rate, address, and how many processes run there."""
    rows = []
    for ns in _our_namespaces():
        qdisc = ""
        if not ns.endswith("-sw"):
            qdisc = _run("ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", DEVICE)
        addr = None
        if not ns.endswith("-sw"):
            addr = re.search(r"inet (\S+)", _run("ip", "-n", ns, "-4", "addr", "show", DEVICE))
        rate = re.search(r"rate (\S+)", qdisc)
        rows.append(
            {
                "namespace": ns,
                "address": addr.group(1) if addr else "-",
                "rate": rate.group(1) if rate else "-",
                "processes": len(_pids(ns)),
            }
        )
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.netcluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="make the nodes and their links")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--rate", required=True, help="each node's link, each way (tc: 200mbit, 1gbit)")
    p.add_argument("--name", default=DEFAULT_NAME)
    p = sub.add_parser("down", help="kill what runs in the namespaces and remove them")
    p.add_argument("--name", default=DEFAULT_NAME)
    p.add_argument("--all", action="store_true", help="every emulated cluster of this tool")
    sub.add_parser("status", help="the namespaces of ours that exist")
    for command, text in (
        ("launch", "OneFlow's launcher on every node: SCRIPT ARGS or -m MODULE ARGS"),
        ("exec", "a command on every node, with {node} {nodes} {master_addr} {master_port}"),
    ):
        p = sub.add_parser(command, help=text)
        p.add_argument("--name", default=DEFAULT_NAME)
        p.add_argument("--timeout", type=float, default=1800, help="seconds, then all is killed")
        if command == "launch":
            p.add_argument("--nproc-per-node", type=int, required=True)
        p.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except (NetClusterError, RankFailure) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _main(args) -> int:
    if args.command == "up":
        c = up(args.nodes, args.rate, args.name)
        print(f"emulated cluster {c.name}: {c.nodes} nodes at {c.rate}, master {c.master_addr}")
    elif args.command == "down":
        gone = down(None if args.all else args.name)
        print(f"removed {', '.join(gone)}" if gone else "nothing of ours to remove")
    elif args.command == "status":
        rows = status()
        print(
            tabulate(rows, headers="keys", tablefmt="github") if rows else "nothing of ours is up"
        )
    else:
        cluster = find(args.name)
        cmd = args.args[1:] if args.args[:1] == ["--"] else args.args
        if not cmd:
            raise NetClusterError(f"{args.command}: give the command to run")
        if args.command == "launch":
            outputs = launch(cluster, args.nproc_per_node, cmd, args.timeout)
        else:
            port = free_port()
            commands = [fill(cmd, cluster, k, port) for k in range(cluster.nodes)]
            outputs = check(
                cluster, " ".join(cmd), run_per_node(cluster, commands, args.timeout), args.timeout
            )
        for node, output in enumerate(outputs):
            print(f"--- node {node} ---\n{output}", end="" if output.endswith("\n") else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
