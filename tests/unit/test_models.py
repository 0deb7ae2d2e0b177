"""Model builders: GPT-3 175B and VGG16 without OneFlow, fast and shaped as traced."""

import json
import os
import pickle
import re
import subprocess
import sys

import pytest

from oneflow_autoddl.ir import Graph, Placement, module_scope
from oneflow_autoddl.models import build, build_gpt, build_vgg
from oneflow_autoddl.sbp import B, S, Signature
from oneflow_autoddl.search.ties import tie_ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT3 = dict(layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257, batch=1536)
# Op counts of a GPT with L blocks: ops outside the blocks + L * ops of a block.
GPT_OPS = {"cuda": (58, 138), "cpu": (83, 186)}
SCHEDULER = re.compile(r"Scheduler_\d+$")  # OneFlow numbers it process-wide

PLANNER_ONLY = """
import json, sys, time
sys.modules["oneflow"] = None  # any `import oneflow` now fails
from oneflow_autoddl.models import build_gpt, build_vgg
start = time.perf_counter()
gpt = build_gpt(96, 12288, 96, 2048, 50257, 1536, mesh=(128, 8))
seconds = time.perf_counter() - start
vgg = build_vgg(16, 1.0, 224, 1000, 256, mesh=(8,))
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "oneflow" and sys.modules[m])
print(json.dumps({"gpt": len(gpt), "vgg": len(vgg), "seconds": seconds, "oneflow": loaded}))
"""


@pytest.fixture(scope="module")
def gpt3():
    return build_gpt(**GPT3, mesh=(128, 8))


def test_builders_need_no_oneflow():
    out = subprocess.run(
        [sys.executable, "-c", PLANNER_ONLY],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["oneflow"] == []
    assert result["gpt"] == GPT_OPS["cuda"][0] + 96 * GPT_OPS["cuda"][1]
    assert result["vgg"] == 243
    print(f"\nGPT-3 175B built in {result['seconds']:.2f} s")


def test_gpt3_175b_shapes_names_placements(gpt3):
    assert len(gpt3) == 13306
    shape = lambda op, bn: gpt3.shape(gpt3.op(op), bn)  # noqa: E731
    assert shape("model.wte.weight", "out") == (50257, 12288)
    assert shape("model.h.95.mlp.fc.weight", "out") == (4 * 12288, 12288)
    assert shape("model.h.95.mlp.fc.weight-m", "out") == (4 * 12288, 12288)
    scores = [
        op for op in gpt3.ops.values() if op.type == "batch_matmul" and op.scope == "model.h.5.attn"
    ]
    assert gpt3.shape(scores[0], "out_0") == (1536, 96, 2048, 2048)
    logits = [
        op for op in gpt3.ops.values() if op.type == "broadcast_matmul" and op.scope == "model"
    ][0]
    assert gpt3.shape(logits, "out_0") == (1536, 2048, 50257)
    reshape = [
        op for op in gpt3.ops.values() if op.type == "reshape" and op.scope == "model.h.7.attn"
    ][0]
    assert reshape.attrs["shape"] == (1536, 2048, 96, 128)
    params = sum(
        gpt3.tensor(op.outputs["out"]).numel
        for op in gpt3.by_role("variable")
        if not op.name.endswith(("-m", "-v", "causal_mask"))
    )
    h, layers = 12288, 96
    assert (
        params == layers * (12 * h * h + 13 * h) + (50257 + 2048) * h + 2 * h
    )  # 174.6e9 (+ 0.4e9 masks)
    assert gpt3.op("model.h.95.attn.q.weight_optimizer").type == "adam_update"
    assert any(re.fullmatch(r"model\.h\.5\.attn-batch_matmul-\d+", name) for name in gpt3.ops)
    for op in gpt3.ops.values():
        # inputs arrive data parallel: the batch of 1536 splits over mesh axis 0, not then over 8
        assert op.native == (Signature({"out": (S(0), B)}) if op.type == "input_conf" else None), (
            op.name
        )
        if not op.name.endswith(("-m", "-v")):
            assert op.scope == module_scope(op.name), op.name
    main = Placement("cuda", tuple(range(1024)), (128, 8))
    single = [op.name for op in gpt3.ops.values() if op.placement != main]
    assert all(gpt3.op(n).placement == Placement("cuda", (0,), (1,)) for n in single)
    assert len(single) == 7 and all(
        n.startswith("System-") or "bias_correction" in n for n in single
    )
    assert gpt3.op("model.wte.weight").attrs["nd_sbp"] == ["B", "B"]


def test_gpt3_blocks_are_tied(gpt3):
    rep = tie_ops(gpt3)
    block = re.compile(r"^model\.h\.(\d+)(?:\.|$)")
    members = {}
    for op in gpt3.ops.values():
        m = block.match(op.scope)
        if m:
            members.setdefault(int(m.group(1)), []).append(op.name)
    assert sorted(members) == list(range(96))
    shared = [rep[name] for name in members[1]]
    assert all([rep[name] for name in members[i]] == shared for i in range(1, 96))


def test_vgg_ties_twin_convs_not_activations():
    """Twin convs of a stage share one choice; the classifier's two ReLUs, alike in shape but
    between different layers, each get their own (OneFlow's pass splits one and not the other)."""
    rep = tie_ops(build_vgg(16, 0.25, 32, 10, 16, mesh=(4,), device="cpu"))
    assert rep["model.features.21-conv2d-30"] == rep["model.features.19-conv2d-27"]
    assert rep["model.classifier.4-relu-50"] == "model.classifier.4-relu-50"
    assert rep["model.classifier.1-relu-47"] == "model.classifier.1-relu-47"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("layers", [2, 3, 5])
def test_gpt_op_counts_and_order(device, layers):
    g = build_gpt(layers, 24, 4, 8, 30, 4, mesh=(2,), device=device)
    outer, per_block = GPT_OPS[device]
    assert len(g) == outer + layers * per_block
    assert ("layer_norm" in g.op_types()) == (device == "cuda")
    # already topological: ir.Graph's own sort keeps the order
    assert list(Graph(g.name, g.ops.values(), g.tensors.values()).ops) == list(g.ops)


def test_vgg16_shapes():
    g = build_vgg(16, 1.0, 224, 1000, 256, mesh=(8,))
    assert len(g) == 243
    assert g.shape(g.op("model.features.0.weight"), "out") == (64, 3, 3, 3)
    assert g.shape(g.op("model.classifier.0.weight"), "out") == (4096, 512 * 7 * 7)
    assert g.shape(g.op("model.classifier.6.weight"), "out") == (1000, 4096)
    convs = [op for op in g.ops.values() if op.type == "conv2d"]
    assert [op.attrs["filters"] for op in convs] == [64, 64, 128, 128, 256, 256, 256] + [512] * 6
    assert g.shape(convs[-1], "out_0") == (256, 512, 14, 14)
    params = sum(
        g.tensor(op.outputs["out"]).numel
        for op in g.by_role("variable")
        if op.name.startswith("model.") and not op.name.endswith("-momentum")
    )
    assert params == 138357544  # VGG16 on ImageNet
    assert build("vgg16", (8,)).op_types() == g.op_types()


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: build_gpt(4, 100, 3, 8, 10, 4, (2,)), "multiple of heads"),
        (lambda: build_gpt(1, 96, 4, 8, 10, 4, (2,)), "layers must be >= 2"),
        (lambda: build_gpt(4, 96, 4, 8, 10, 4, (2,), device="tpu"), "device"),
        (lambda: build_gpt(4, 96, 4, 8, 10, 4, (2, 2), ranks=[0, 1]), "4 devices"),
        (lambda: build_vgg(16, 1.0, 16, 10, 4, (2,)), "too small for 5 max-pools"),
        (lambda: build_vgg(16, 1.0, 100, 10, 4, (2,)), "multiple of 32"),
        (lambda: build_vgg(15, 1.0, 32, 10, 4, (2,)), "depth must be one of"),
        (lambda: build_vgg(16, 0.1, 32, 10, 4, (2,)), "multiples 1, 2, 4, 8, 64"),
        (lambda: build("gpt4", (2,)), "unknown model"),
    ],
)
def test_bad_sizes_are_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_placement_pickled_in_another_process_keys_the_same_dicts():
    """A placement hashes once, and str hashes are salted per process: the pickle carries the
    fields, not the hash."""
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pickle, sys; from oneflow_autoddl.ir import Placement; "
            "p = Placement('cpu', (0, 1), (2,)); hash(p); sys.stdout.buffer.write(pickle.dumps(p))",
        ],
        capture_output=True,
        env=dict(os.environ, PYTHONHASHSEED="7"),
        check=True,
    )
    theirs = pickle.loads(made.stdout)
    ours = Placement("cpu", (0, 1), (2,))
    assert theirs == ours and {ours: 1}[theirs] == 1
    assert Placement("cpu", (0, 1), (1, 2)) != ours
