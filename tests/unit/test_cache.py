"""The plan cache: keyed on everything a plan depends on; a corrupt entry is replaced."""

import logging

import pytest

from oneflow_autoddl.cache import PlanCache, plan_key
from oneflow_autoddl.cost.cluster import cluster_from_json, load_cluster
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.planner import plan
from oneflow_autoddl.search.options import SearchOptions

OPTIONS = SearchOptions()


def gpt(batch=8, hidden=64):
    return build_gpt(2, hidden, 4, 8, 64, batch, mesh=(2,), device="cpu")


def key(
    graph=None, cluster=None, memory=None, hold=None, rpn=None, strategy="autoddl", opts=OPTIONS
):
    return plan_key(
        graph or gpt(), cluster or load_cluster("cpu-local"), memory, hold, rpn, strategy, opts
    )


def test_the_same_graph_built_again_has_the_same_key():
    assert key(gpt()) == key(gpt())


@pytest.mark.parametrize(
    "change",
    [
        {"graph": "batch"},
        {"graph": "hidden"},
        {"cluster": "dgx-a100"},
        {"cluster": "edited"},
        {"memory": 2**30},
        {"hold": {"x": "user SBP"}},
        {"rpn": 1},
        {"strategy": "megatron"},
        {"opts": SearchOptions(bytes_tie=0.01)},
    ],
)
def test_anything_a_plan_depends_on_changes_the_key(change):
    kwargs = dict(change)
    if kwargs.get("graph") == "batch":
        kwargs["graph"] = gpt(batch=16)
    elif kwargs.get("graph") == "hidden":
        kwargs["graph"] = gpt(hidden=128)
    if kwargs.get("cluster") == "edited":
        data = load_cluster("cpu-local").to_json()
        data["links"]["intra_node"]["latency"] *= 2
        kwargs["cluster"] = cluster_from_json(data)
    elif "cluster" in kwargs:
        kwargs["cluster"] = load_cluster(kwargs["cluster"])
    assert key(**kwargs) != key()


def test_a_plan_comes_back_and_a_corrupt_entry_is_dropped_with_a_warning(tmp_path, caplog):
    cache = PlanCache(str(tmp_path))
    k = key()
    assert cache.get(k) is None
    made = plan(gpt(), "cpu-local")
    cache.put(k, made)
    assert cache.get(k) == made
    with open(cache.path(k), "w") as f:
        f.write('{"mesh": "2", "ops": ')
    with caplog.at_level(logging.WARNING):
        assert cache.get(k) is None
    assert "unreadable" in caplog.text
    assert not (tmp_path / f"{k}.json").exists()
    cache.put(k, made)
    assert cache.get(k) == made
