"""flowvision 0.2.1's models (OneFlow's model zoo) as untraced training graphs with their inputs.

`build("resnet18", "2")` gives (graph, inputs) for examples/common.py's TrainGraph (cross
entropy, backward, one optimizer) on a mesh, as examples/models.build does for the examples.
Every model is built with 10 classes and with dropout and drop-path rates 0, so that the
losses of two plans can be compared (dropout's random masks depend on the sharding).

Image sizes (a forward at each checked in one process): the convolutional networks pool
adaptively or average over space and run from 32 px; they are built at 64, where their last
feature maps are still 2 x 2. ConvNeXt takes 32; ViT and MLP-Mixer take 32 px as 2 x 2
patches of 16 (their position and token-mixing weights follow the patch count). Swin needs
224: every stage but the last halves an even resolution and each stage's must be a multiple
of its 7 x 7 window (112 and 64 fail): 224 is the smallest size that is both.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import oneflow as flow
from flowvision import models
from flowvision.layers import StochasticDepth
from flowvision.models.swin_transformer import SwinTransformer
from flowvision.models.vision_transformer import VisionTransformer

from .common import batch_inputs, replicate, train_graph

NUM_CLASSES = 10
OPTIMIZERS = ("sgd", "adamw")


@dataclass(frozen=True)
class ZooModel:
    """A zoo model: `make(image_size, num_classes)` builds it; `image_size` and `batch` are the
    defaults (a batch divisible by 4 ranks; Swin's is 4: at 8 its data-parallel step took 9.2 s
    on 2 CPU ranks here, issue 16)."""

    make: Callable[[int, int], flow.nn.Module]
    image_size: int
    batch: int = 8


def _factory(name: str) -> Callable[[int, int], flow.nn.Module]:
    """flowvision's own constructor (its image size follows the input)."""

    def make(image_size: int, num_classes: int) -> flow.nn.Module:
        return getattr(models, name)(num_classes=num_classes)

    return make


def _vit(image_size: int, num_classes: int) -> flow.nn.Module:
    """vit_tiny_patch16_224's architecture; its constructor fixes img_size=224."""
    return VisionTransformer(
        img_size=image_size,
        patch_size=16,
        embed_dim=192,
        depth=12,
        num_heads=3,
        num_classes=num_classes,
    )


def _swin(image_size: int, num_classes: int) -> flow.nn.Module:
    """swin_tiny_patch4_window7_224's architecture with drop_path_rate 0 (its constructor
    fixes 0.2)."""
    return SwinTransformer(
        img_size=image_size,
        patch_size=4,
        window_size=7,
        embed_dim=96,
        depths=(2, 2, 6, 2),
        num_heads=(3, 6, 12, 24),
        drop_path_rate=0.0,
        num_classes=num_classes,
    )


def _sized(name: str) -> Callable[[int, int], flow.nn.Module]:
    """flowvision's constructor, told the image size."""

    def make(image_size: int, num_classes: int) -> flow.nn.Module:
        return getattr(models, name)(img_size=image_size, num_classes=num_classes)

    return make


ZOO: Dict[str, ZooModel] = {
    "alexnet": ZooModel(_factory("alexnet"), 64),
    "vgg11_bn": ZooModel(_factory("vgg11_bn"), 64),
    "resnet18": ZooModel(_factory("resnet18"), 64),
    "resnet50": ZooModel(_factory("resnet50"), 64),
    "mobilenet_v2": ZooModel(_factory("mobilenet_v2"), 64),
    "mobilenet_v3_small": ZooModel(_factory("mobilenet_v3_small"), 64),
    "efficientnet_b0": ZooModel(_factory("efficientnet_b0"), 64),
    "densenet121": ZooModel(_factory("densenet121"), 64),
    "shufflenet_v2_x1_0": ZooModel(_factory("shufflenet_v2_x1_0"), 64),
    "vit_tiny_patch16_224": ZooModel(_vit, 32),
    "swin_tiny_patch4_window7_224": ZooModel(_swin, 224, batch=4),
    "convnext_tiny_224": ZooModel(_factory("convnext_tiny_224"), 32),
    "mlp_mixer_s16_224": ZooModel(_sized("mlp_mixer_s16_224"), 32),
}


def spec(name: str) -> ZooModel:
    """The zoo's model `name`, or the held-out flowvision model of that name (`held_out`)."""
    return ZOO[name] if name in ZOO else held_out(name)


def held_out(name: str) -> ZooModel:
    """Any other model flowvision builds, by its constructor's name (the held-out models issue
    16 is also checked on): 10 classes where the constructor takes a class count (its own
    otherwise), at 224 px unless told another size."""
    if not callable(getattr(models, name, None)):
        raise ValueError(
            f"unknown zoo model {name!r}: name one of {', '.join(ZOO)} or any constructor in "
            f"flowvision.models"
        )

    def make(image_size: int, num_classes: int) -> flow.nn.Module:
        try:
            return getattr(models, name)(num_classes=num_classes)
        except TypeError:
            return getattr(models, name)()

    return ZooModel(make, 224)


def without_dropout(module: flow.nn.Module) -> flow.nn.Module:
    """Every dropout's, stochastic depth's and drop-path's probability set to 0: no random masks
    (EfficientNet's stochastic depth also cannot trace in a graph: it asks a global tensor for
    its device)."""
    for m in module.modules():
        if isinstance(m, (flow.nn.modules.dropout._DropoutNd, StochasticDepth)):
            m.p = 0.0
        if hasattr(m, "drop_prob"):
            m.drop_prob = 0.0
    return module


def make_model(name: str, image_size: Optional[int] = None) -> Tuple[flow.nn.Module, int]:
    """(the model without dropout, its image size), on the CPU of this process (`spec`)."""
    model = spec(name)
    size = image_size or model.image_size
    flow.manual_seed(0)
    return without_dropout(model.make(size, NUM_CLASSES)), size


def _optimizer(name: str, params: Sequence[flow.nn.Parameter]) -> flow.optim.Optimizer:
    if name in ("sgd", "default"):
        return flow.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == "adamw":
        return flow.optim.AdamW(params, lr=1e-3, weight_decay=0.05)
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def build(
    name: str,
    mesh: str,
    plan: str = "dp",
    batch: Optional[int] = None,
    optimizer: str = "default",
    sizes: Optional[Dict[str, int]] = None,
    **flags,
):
    """(graph, inputs): `name`'s training graph on `mesh` ("1" traces in one process) with
    `optimizer` ("sgd" or "default": SGD with momentum; "adamw"), its parameters replicated and
    the batch (default the model's) split, as the examples feed it; `sizes` may set
    "image_size" (default the model's);
    `plan` and flags as examples/common.train_graph takes them (the builder interface of
    examples/models.build)."""
    unknown = set(sizes or {}) - {"image_size"}
    if unknown:
        raise TypeError(f"zoo models take only an image_size, not {sorted(unknown)}")
    model, size = make_model(name, (sizes or {}).get("image_size"))
    batch = batch or spec(name).batch
    net = replicate(model, mesh)
    rng = np.random.RandomState(0)
    x = rng.randn(batch, 3, size, size).astype(np.float32)
    y = rng.randint(0, NUM_CLASSES, (batch,))
    opt = _optimizer(optimizer, net.parameters())
    graph = train_graph(net, flow.nn.CrossEntropyLoss(), opt, plan, **flags)
    inputs = batch_inputs([x, y], mesh)
    return graph, inputs


def trace(name: str, optimizer: str = "sgd", batch: int = 4, image_size: Optional[int] = None):
    """The Job of `name`'s training graph traced in this process on one device (build_graph
    only: nothing is compiled or run); `oneflow_autoddl.remesh` moves it onto a mesh."""
    sizes = {"image_size": image_size} if image_size else None
    graph, inputs = build(name, "1", batch=batch, optimizer=optimizer, sizes=sizes)
    job, _ = graph.build_graph(*inputs)
    return job
