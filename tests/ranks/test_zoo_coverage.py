"""Every op of the zoo's training graphs has a rule: no model is planned around ops OneFlow places
by itself.

Two processes side by side (tests.ranks.rank_zoo:coverage on one rank each, half the zoo each:
the machine has 2 cores): each model of examples/zoo.py is traced on one device (build_graph
only, SGD with momentum and AdamW taking turns across models), moved onto a mesh of 2 and of
2 x 2, and the candidates of every distinct unit are filled (units alike in op types, roles,
attributes, shapes and dtypes have the same candidates: a repeated block is checked once).
Planning itself is left out: the search over densenet121 alone took minutes here. Two held-out
flowvision models (examples/zoo.held_out, at 224 px) join them, one per half: RexNet writes its
shortcut into a slice in place (slice_update, constant), PVT resizes its position embeddings
(upsample_bilinear_2d).
"""

from concurrent.futures import ThreadPoolExecutor

import pytest

from examples.zoo_names import MODELS

MESHES = [[2], [2, 2]]
HELD_OUT = ["rexnetv1_1_0", "pvt_tiny"]
# Halves of about equal tracing time (each had 35-40 s of it under load): DenseNet-121, ConvNeXt
# and Swin trace longest.
HALVES = [
    [
        "densenet121",
        "convnext_tiny_224",
        "alexnet",
        "resnet18",
        "mobilenet_v2",
        "mlp_mixer_s16_224",
        "shufflenet_v2_x1_0",
        "rexnetv1_1_0",
    ],
    [
        "vgg11_bn",
        "resnet50",
        "mobilenet_v3_small",
        "efficientnet_b0",
        "vit_tiny_patch16_224",
        "swin_tiny_patch4_window7_224",
        "pvt_tiny",
    ],
]


@pytest.mark.ranks
def test_every_op_of_the_zoo_has_a_rule_on_each_mesh(ranks):
    assert sorted(HALVES[0] + HALVES[1]) == sorted([*MODELS, *HELD_OUT])

    def half(models):
        return ranks("tests.ranks.rank_zoo:coverage", 1, timeout=600, meshes=MESHES, models=models)

    with ThreadPoolExecutor(len(HALVES)) as pool:
        out = {k: v for (result,) in pool.map(half, HALVES) for k, v in result.items()}
    assert sorted(out) == sorted([*MODELS, *HELD_OUT])
    for name, r in out.items():
        assert r["unruled_types"] == [], name
        assert not r["dropout"], f"{name} is built without dropout"
        for mesh, m in r["meshes"].items():
            assert m["no_rule"] == [], (name, mesh)
            assert m["searched"] > 0 and m["no_candidates"] == [], (name, mesh)
