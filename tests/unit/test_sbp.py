"""SBP algebra: parse and format in OneFlow's notation, local shapes, signatures."""

import subprocess
import sys

import pytest

from oneflow_autoddl.sbp import (
    B,
    P,
    S,
    Signature,
    evenly_split,
    format_nd,
    format_signature,
    local_shape,
    parse_nd,
    parse_sbp,
    parse_signature,
    product_signature,
)


@pytest.mark.parametrize(
    "text,value",
    [
        ("S(0)", S(0)),
        ("S( 3 )", S(3)),
        ("B", B),
        ("P", P),
        ("split(dim=1)", S(1)),
        ("broadcast", B),
        ("partial_sum", P),
    ],
)
def test_parse_one(text, value):
    assert parse_sbp(text) == value


@pytest.mark.parametrize("bad", ["", "S", "S(-1)", "Q", "S(0", "(S(0), X)"])
def test_parse_rejects_with_the_text(bad):
    with pytest.raises(ValueError) as err:
        parse_nd(bad)
    assert (
        repr(bad.strip()) in str(err.value)
        or "not an SBP" in str(err.value)
        or "empty" in str(err.value)
    )


@pytest.mark.parametrize("nd", [(S(0),), (B,), (P,), (S(0), B), (B, S(1)), (P, S(2), B)])
def test_format_round_trips(nd):
    text = format_nd(nd)
    assert parse_nd(text) == nd
    assert text == (str(nd[0]) if len(nd) == 1 else "(" + ", ".join(map(str, nd)) + ")")


def test_oneflow_notation():
    assert format_nd((S(0), B)) == "(S(0), B)"
    assert format_nd((P,)) == "P"


def test_local_shape_splits_successively_and_floors():
    assert local_shape((8, 6), (S(0), S(0)), (2, 2)) == (2, 6)
    assert local_shape((8, 6), (S(0), S(1)), (2, 3)) == (4, 2)
    assert local_shape((10, 6), (S(0),), (4,)) == (2, 6)  # uneven: OneFlow keeps it
    assert local_shape((3, 6), (S(0),), (4,)) is None  # dimension smaller than the mesh axis
    assert local_shape((3, 6), (S(2),), (2,)) is None  # axis out of range
    assert local_shape((4, 6), (S(0), S(0)), (2, 4)) is None  # 4 / 2 = 2 < 4


def test_even_split():
    assert evenly_split((8, 6), (S(0), S(1)), (2, 3))
    assert not evenly_split((10, 6), (S(0), B), (4, 1))
    assert not evenly_split((8, 6), (S(0), S(0)), (2, 3))  # 8/2 = 4 not divisible by 3


def test_signature_is_a_hashable_mapping():
    a = Signature({"a_0": (S(0), B), "out_0": (S(0), B)})
    b = parse_signature({"out_0": "(S(0), B)", "a_0": "(S(0), B)"})
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a.ndim == 2
    assert format_signature(a) == "a_0: (S(0), B), out_0: (S(0), B)"


def test_product_of_one_d_signatures():
    sig = product_signature([{"x": S(0), "y": B}, {"x": B, "y": S(1)}])
    assert sig == {"x": (S(0), B), "y": (B, S(1))}


def test_planner_imports_without_oneflow():
    """The planner (IR, SBP, rules, cost, search, report) never imports OneFlow."""
    code = (
        "import sys; sys.modules['oneflow'] = None\n"
        "import oneflow_autoddl, oneflow_autoddl.planner, oneflow_autoddl.report\n"
        "import oneflow_autoddl.cli, oneflow_autoddl.models, oneflow_autoddl.remesh\n"
        "loaded = [m for m in sys.modules if sys.modules[m]]\n"
        "assert not any(m == 'oneflow' or m.startswith('oneflow.') for m in loaded)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("order", ["oneflow first", "plugin first"])
def test_hook_installs_in_either_import_order(order):
    first, second = (
        ("oneflow", "oneflow_autoddl")
        if order == "oneflow first"
        else ("oneflow_autoddl", "oneflow")
    )
    code = (
        f"import {first}, {second}\nimport oneflow as flow\n"
        "assert flow.nn.Graph._compile.__module__ == 'oneflow_autoddl.adapter.hook'\n"
        "assert hasattr(flow.nn.graph.graph_config.GraphConfig, 'set_auto_parallel_cluster')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
