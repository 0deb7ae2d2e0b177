"""Ranks wait for rank 0 before OneFlow starts (launch.wait_for_rank0), and a launch is done
once every rank has written its result (launch.wait_results), without OneFlow."""

import socket
import threading
import time

import pytest

import oneflow_autoddl
from oneflow_autoddl import launch


def _listen_after(seconds: float) -> int:
    """A port nothing listens on yet; a listener opens on it after `seconds`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def serve():
        time.sleep(seconds)
        server = socket.create_server(("127.0.0.1", port))
        server.settimeout(5.0)
        try:
            server.accept()[0].close()
        finally:
            server.close()

    threading.Thread(target=serve, daemon=True).start()
    return port


def test_a_rank_other_than_0_returns_once_rank_0_listens(monkeypatch):
    port = _listen_after(0.5)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    start = time.monotonic()
    launch.wait_for_rank0(deadline_s=10.0)
    assert 0.4 < time.monotonic() - start < 5.0


@pytest.mark.parametrize(
    "rank, world_size",
    [("0", "2"), ("-1", "1"), ("1", "")],  # rank 0; what a lone process importing OneFlow holds
    ids=["rank 0", "after a lone import of OneFlow", "no world size"],
)
def test_rank_0_and_a_single_process_do_not_wait(monkeypatch, rank, world_size):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")  # nothing listens there
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", world_size)
    start = time.monotonic()
    launch.wait_for_rank0(deadline_s=10.0)
    assert time.monotonic() - start < 1.0


def test_importing_oneflow_waits_for_rank_0_then_installs_the_hook(monkeypatch):
    calls = []

    class Loader:
        def exec_module(self, module):
            calls.append("oneflow imported")

    monkeypatch.setattr(launch, "wait_for_rank0", lambda: calls.append("waited"))
    monkeypatch.setattr(oneflow_autoddl, "_install", lambda: calls.append("hook installed"))
    finder = oneflow_autoddl._InstallAfterOneflow()
    finder._loader = Loader()
    finder.exec_module(None)
    assert calls == ["waited", "oneflow imported", "hook installed"]


def _group(tmp_path, script: str):
    with open(tmp_path / "log", "w") as log:  # the child holds its own copy of the file
        return launch.start_group(["sh", "-c", script], log, cwd=str(tmp_path))


def test_a_launch_ends_once_every_rank_wrote_its_result(tmp_path):
    """Ranks that linger after their results (OneFlow's teardown) are not waited for: killed."""
    proc = _group(tmp_path, "echo 1 > rank0.json; sleep 0.3; echo 2 > rank1.json; sleep 600")
    start = time.monotonic()
    assert launch.wait_results(proc, str(tmp_path), 2, timeout=60) == 0
    assert time.monotonic() - start < 10
    assert proc.pid not in launch.alive_groups()


@pytest.mark.parametrize("script,code", [("echo 1 > rank0.json; exit 3", 3), ("sleep 600", None)])
def test_a_launch_without_every_result_gives_its_exit_code_or_none_past_its_timeout(
    tmp_path, script, code
):
    proc = _group(tmp_path, script)
    assert launch.wait_results(proc, str(tmp_path), 2, timeout=1) == code
    assert proc.pid not in launch.alive_groups()
