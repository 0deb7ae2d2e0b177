"""The emulated cluster's pieces that need no root: names, commands, refusals, counters."""

import os
import sys

import pytest

from benchmarks import netcluster
from oneflow_autoddl import launch


def test_it_says_why_it_cannot_make_namespaces(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in netcluster.unavailable()
    with pytest.raises(netcluster.NetClusterError, match="root"):
        netcluster.up(2, "200mbit", "x")


def test_nodes_are_named_and_addressed_inside_their_own_namespaces():
    c = netcluster.NetCluster("t1", 3, "1gbit")
    assert c.namespaces == ["autoddl-t1-n0", "autoddl-t1-n1", "autoddl-t1-n2", "autoddl-t1-sw"]
    assert [c.address(k) for k in range(3)] == ["10.213.0.1", "10.213.0.2", "10.213.0.3"]
    cmd = netcluster.node_command(c, 2, 4, 29555)
    assert cmd[:4] == ["ip", "netns", "exec", "autoddl-t1-n2"]
    flags = " ".join(cmd)
    assert "--nnodes 3 --node_rank 2 --master_addr 10.213.0.1 --master_port 29555" in flags
    assert "--nproc_per_node 4" in flags


def test_a_per_node_command_is_filled_in():
    c = netcluster.NetCluster("t1", 2, "1gbit")
    template = ["x", "--node-rank", "{node}", "--nnodes", "{nodes}", "{master_addr}:{master_port}"]
    assert netcluster.fill(template, c, 1, 7) == [
        "x",
        "--node-rank",
        "1",
        "--nnodes",
        "2",
        "10.213.0.1:7",
    ]


@pytest.mark.parametrize("name, rate", [("Bad", "1gbit"), ("ok", "fast")])
def test_bad_names_and_rates_are_refused_before_anything_is_made(monkeypatch, name, rate):
    monkeypatch.setattr(netcluster, "unavailable", lambda: None)
    with pytest.raises(netcluster.NetClusterError, match="name|rate"):
        netcluster.up(2, rate, name)


def test_tcp_payload_is_tx_bytes_less_the_headers():
    before = {"tx_bytes": 100, "tx_packets": 1}
    after = {"tx_bytes": 100 + 3 * 66 + 5000, "tx_packets": 4}
    assert netcluster.tcp_payload(before, after) == 5000


@pytest.mark.parametrize(
    "nodes, cores, expected",
    [
        (2, [0, 1], [[0], [1]]),
        (2, [0, 1, 2, 3], [[0, 1], [2, 3]]),
        (3, [0, 1, 2, 3], [[0], [1], [2, 3]]),
        (3, [4, 5], [[4], [5], [4]]),
    ],
)
def test_each_node_runs_on_its_own_share_of_the_cores(nodes, cores, expected):
    assert netcluster.node_cores(nodes, cores) == expected


def test_a_group_started_on_cores_runs_there_with_its_children(tmp_path):
    core = sorted(os.sched_getaffinity(0))[-1]
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    child = f"import subprocess, sys; {show}; subprocess.run([sys.executable, '-c', {show!r}])"
    with open(tmp_path / "out", "w") as log:
        proc = launch.start_group([sys.executable, "-c", child], log, cores=[core])
    proc.wait(timeout=60)
    assert (tmp_path / "out").read_text().split() == [f"[{core}]", f"[{core}]"]
