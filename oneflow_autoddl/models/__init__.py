"""The examples' training graphs at any size, without OneFlow: plan GPT-3 on 1,024 devices on a
laptop.

`build_gpt` and `build_vgg` instantiate templates traced once from OneFlow 0.9.0 (see
template.py, made by `python -m tools.make_templates`), so the ir.Graph is the
one `read_job` would give for a trace at these sizes -- forward, backward and optimizer ops,
OneFlow's names, blob names, shapes and attrs -- with `Op.native` None (no OneFlow to choose).
"""

from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from ..errors import ConfigError
from ..ir import Graph
from ..mesh import mesh_size, parse_mesh
from .template import load

DEVICES = ("cpu", "cuda")
VGG_DEPTHS = (11, 13, 16, 19)
_VGG_CHANNELS = (64, 128, 256, 512, 4096)  # examples/vgg_model.py: conv widths and the classifier's
MeshLike = Union[str, Sequence[int]]


def _placement(
    mesh: MeshLike, device: str, ranks: Optional[Sequence[int]]
) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    shape = parse_mesh(mesh) if isinstance(mesh, str) else tuple(int(h) for h in mesh)
    if not shape or any(h < 1 for h in shape):
        raise ConfigError(
            f"mesh {mesh!r} must be one or more positive axis sizes, e.g. (8,) or (16, 64)"
        )
    if device not in DEVICES:
        raise ConfigError(f"device must be one of {DEVICES}, not {device!r}")
    ranks = tuple(range(mesh_size(shape))) if ranks is None else tuple(ranks)
    if len(ranks) != mesh_size(shape):
        raise ConfigError(
            f"mesh {shape} holds {mesh_size(shape)} devices, but {len(ranks)} ranks were given"
        )
    return shape, ranks


def _positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, not {value!r}")


def build_gpt(
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    vocab: int,
    batch: int,
    mesh: MeshLike,
    device: str = "cuda",
    ranks: Optional[Sequence[int]] = None,
) -> Graph:
    """examples/gpt.py's training graph (GPT + GPTLoss, AdamW) for a global `batch` on `mesh`.

    `device` "cuda" has LayerNorm as OneFlow's fused `layer_norm` op; "cpu" as OneFlow traces
    it on CPU, decomposed into reduce_sum / var / rsqrt / broadcast ops.
    """
    _positive(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab, batch=batch)
    if layers < 2:
        raise ConfigError(
            f"layers must be >= 2 (the templates hold a first and a last block), not {layers}"
        )
    if hidden % heads:
        raise ConfigError(f"hidden {hidden} must be a multiple of heads {heads}")
    shape, ranks = _placement(mesh, device, ranks)
    sizes = {
        "batch": batch,
        "seq_len": seq_len,
        "heads": heads,
        "head_dim": hidden // heads,
        "vocab": vocab,
    }
    return load(f"gpt-{device}").instantiate(sizes, shape, device, ranks, layers=layers)


def _scaled(channels: int, width_mult: float) -> int:
    """examples/vgg_model.py's `scaled`."""
    return max(1, int(round(channels * width_mult)))


def build_vgg(
    depth: int,
    width_mult: float,
    image_size: int,
    num_classes: int,
    batch: int,
    mesh: MeshLike,
    device: str = "cuda",
    ranks: Optional[Sequence[int]] = None,
) -> Graph:
    """examples/vgg.py's training graph (VGG, cross entropy, SGD with momentum) for a global
    `batch`.

    The templates hold every width as a multiple of the first conv's: `width_mult` must keep
    64w, 128w, ..., 4096w in the ratios 1 : 2 : ... : 64 after rounding (0.125, 0.25, 1.0 do).
    """
    if depth not in VGG_DEPTHS:
        raise ConfigError(f"depth must be one of {VGG_DEPTHS}, not {depth!r}")
    _positive(image_size=image_size, num_classes=num_classes, batch=batch)
    if image_size < 32:
        raise ConfigError(f"image_size {image_size} is too small for 5 max-pools (at least 32)")
    if image_size % 32:
        raise ConfigError(
            f"image_size {image_size} must be a multiple of 32, so that 5 max-pools halve it "
            "exactly"
        )
    if width_mult <= 0:
        raise ConfigError(f"width_mult must be > 0, not {width_mult}")
    first = _scaled(64, width_mult)
    widths = [_scaled(c, width_mult) for c in _VGG_CHANNELS]
    if widths != [c // 64 * first for c in _VGG_CHANNELS]:
        raise ConfigError(
            f"width_mult {width_mult} gives widths {widths} for {list(_VGG_CHANNELS)}, "
            f"not multiples 1, 2, 4, 8, 64 of {first}: choose a multiple of 1/64"
        )
    shape, ranks = _placement(mesh, device, ranks)
    sizes = {"batch": batch, "channels": first, "spatial": image_size // 32, "classes": num_classes}
    return load(f"vgg{depth}").instantiate(sizes, shape, device, ranks)


# Named configurations for command lines: name -> (builder, its sizes); mesh and device come apart.
MODELS: Dict[str, Tuple[Callable[..., Graph], Dict[str, Any]]] = {
    "gpt2": (
        build_gpt,
        dict(layers=12, hidden=768, heads=12, seq_len=1024, vocab=50257, batch=512),
    ),
    "gpt3-175b": (
        build_gpt,
        dict(layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257, batch=1536),
    ),
    "vgg16": (
        build_vgg,
        dict(depth=16, width_mult=1.0, image_size=224, num_classes=1000, batch=256),
    ),
    "vgg19": (
        build_vgg,
        dict(depth=19, width_mult=1.0, image_size=224, num_classes=1000, batch=256),
    ),
}


def build(
    name: str,
    mesh: MeshLike,
    device: str = "cuda",
    ranks: Optional[Sequence[int]] = None,
    **sizes: Any,
) -> Graph:
    """`build("gpt3-175b", (128, 8))`; keyword sizes override the configuration's."""
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r}: choose one of {', '.join(sorted(MODELS))}")
    builder, defaults = MODELS[name]
    return builder(mesh=mesh, device=device, ranks=ranks, **{**defaults, **sizes})


__all__ = ["MODELS", "build", "build_gpt", "build_vgg"]
