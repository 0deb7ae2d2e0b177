"""Automatic mixed precision as OneFlow 0.9.0's AutoMixedPrecision pass does it, on the IR.

With `graph.config.enable_amp(True)`, the pass (oneflow/core/job_rewriter/auto_mixed_precision.cpp,
its lists in auto_mixed_precision_lists.cpp, at v0.9.0) runs on the whole training Job
(forward, backward and optimizer) inside `build_graph`, on CUDA ops only: a Job traced with AMP
on GPUs is already in mixed precision, and on CPU ranks the pass changes nothing. This module
gives a Job traced in float32 (a template of oneflow_autoddl.models, a CPU trace) the precision
the pass would give it on GPUs, so that a plan for a cluster can be costed with it:
  - the white list (matrix products and convolutions, forward and backward) runs in half
    precision, and so do gray-list ops (elementwise, normalisation, reductions) between two
    white ones and clear-list ops (reshapes, gathers, ReLU) next to a white one, unless a
    black-list op lies downstream through gray and clear ones;
  - a cast to half is inserted on every float32 tensor a half op reads from a float32 op (one
    per tensor: `<op>-<blob>-cast_f2h`), and a cast back to float32 on every tensor a half op
    gives to a float32 op (`-cast_h2f`), but for the inputs the pass never casts;
  - variables (master weights, optimizer state) stay float32: a half op reads a half copy of
    a weight, and the update reads the gradient cast back to float32.
The cost model then prices it: half the bytes for the half tensors (memory and boxing), and the
device's half-precision FLOP rate for the matmuls and convolutions that run in half
(cost.compute takes the rate of an op's output dtype). Loss scaling (a GradScaler's ops) is not
added.
"""

from dataclasses import replace
from typing import Dict, List, Set

from .errors import ConfigError
from .ir import Graph, Op, Tensor, module_scope

HALF = {"fp16": "float16", "bf16": "bfloat16", "float16": "float16", "bfloat16": "bfloat16"}

WHITE = frozenset(
    """matmul batch_matmul conv2d conv_data_grad conv_filter_grad conv_bias_grad
    amp_white_identity broadcast_matmul broadcast_matmul_grad_b
    fused_self_attention_query_mul_key_and_value fused_self_attention_query_mul_key_and_value_grad
    prelu prelu_grad tf_prelu tf_prelu_grad cublas_fused_mlp cublas_fused_mlp_grad
    fused_matmul_bias cublas_bias_add_relu_matmul_grad fused_glu
    fused_matmul_bias_add_relu_dropout fused_relu_dropout_grad fused_dot_feature_interaction
    fused_dot_feature_interaction_grad one_embedding_fused_lookup one_embedding_fused_lookup_grad
    binary_cross_entropy_with_logits_reduce_mean binary_cross_entropy_with_logits_reduce_mean_grad
    fused_cross_feature_interaction fused_cross_feature_interaction_v1_grad
    fused_cross_feature_interaction_v2_grad fused_multi_head_attention_inference
    grouped_matmul_bias""".split()
)
BLACK = frozenset({"amp_black_identity"})
GRAY = frozenset(
    """add_n tf_avg_pool_1d tf_avg_pool_1d_grad tf_avg_pool_2d tf_avg_pool_2d_grad tf_avg_pool_3d
    tf_avg_pool_3d_grad avg_pool_1d avg_pool_1d_grad avg_pool_2d avg_pool_2d_grad avg_pool_3d
    avg_pool_3d_grad bias_add reduce_sum reduce_sum_like sigmoid_grad tanh tanh_grad sqrt
    sqrt_grad scalar_mul scalar_mul_by_tensor scalar_add scalar_div scalar_pow broadcast_add
    broadcast_sub broadcast_mul broadcast_div layer_norm layer_norm_param_grad layer_norm_grad
    rms_norm rms_norm_grad rms_norm_param_grad dropout dropout_grad softmax softmax_grad
    log_softmax log_softmax_grad gelu gelu_grad fast_gelu fast_gelu_grad normalization
    normalization_grad normalization_add_relu normalization_add_relu_grad
    sparse_softmax_cross_entropy sparse_softmax_cross_entropy_grad nll nll_grad
    fused_tril_scale_softmax_mask_scale fused_tril_scale_softmax_mask_scale_grad
    fused_scale_mask_softmax_dropout fused_scale_mask_softmax_dropout_grad
    fused_scale_mask_softmax fused_scale_mask_softmax_grad
    fused_bias_add_scale_mask_softmax_dropout fused_bias_add_gelu fused_bias_add_gelu_grad
    fused_bias_add_mask_scale fused_fast_gelu_mul fused_fast_gelu_mul_grad acc reciprocal
    reciprocal_no_nan group_norm group_norm_param_grad group_norm_grad silu silu_grad
    fused_weighted_sum""".split()
)
CLEAR = frozenset(
    """broadcast_like gather gather_nd scatter_nd scatter_nd_like unsorted_segment_sum_like
    tf_max_pool_1d tf_max_pool_1d_grad tf_max_pool_2d tf_max_pool_2d_grad tf_max_pool_3d
    tf_max_pool_3d_grad max_pool_1d max_pool_1d_grad max_pool_2d max_pool_2d_grad max_pool_3d
    max_pool_3d_grad reshape reshape_like relu relu_grad transpose random_mask_like concat
    split_like pad same_padding same_padding_grad tril slice slice_grad fused_scale_tril identity
    squeeze embedding embedding_grad expand expand_dims cast_to_static_shape parallel_cast
    hierarchical_parallel_cast hierarchical_parallel_cast_like repeat unpack pack nvtx_start
    nvtx_end narrow narrow_grad ones_like pinned_identity to_contiguous copy
    upsample_nearest_2d""".split()
)
# Inputs the pass never casts (REGISTER_NO_CAST_REGISTRY): (op type, blob name).
NO_CAST = frozenset(
    [("normalization", f"{arg}_0") for arg in ("moving_mean", "moving_variance", "gamma", "beta")]
    + [("normalization_grad", "gamma_0")]
    + [
        ("normalization_add_relu", f"{arg}_0")
        for arg in ("moving_mean", "moving_variance", "gamma", "beta")
    ]
    + [
        ("normalization_add_relu_grad", f"{arg}_0")
        for arg in ("gamma", "beta", "mean", "inv_variance", "reserve_space")
    ]
    + [
        (t, f"{arg}_0")
        for t in ("layer_norm_grad", "layer_norm_param_grad")
        for arg in ("mean", "inv_variance")
    ]
)


class _Edges:
    """Each op's producers and consumers (ops, through tensors)."""

    def __init__(self, graph: Graph):
        self.order = list(graph.ops)
        self.producers: Dict[str, Set[str]] = {n: set() for n in graph.ops}
        self.consumers: Dict[str, Set[str]] = {n: set() for n in graph.ops}
        for name, op in graph.ops.items():
            for lbn in op.inputs.values():
                p = graph.tensor(lbn).producer
                self.producers[name].add(p)
                self.consumers[p].add(name)

    def sweep(self, reverse: bool, start, satisfied, marked: Set[str]) -> None:
        """OneFlow's DfsTopoGraphTraversal: in topological order (reversed: from the sinks), mark
        an op that starts, or that is satisfied and has a marked father (a producer; reversed, a
        consumer)."""
        fathers = self.consumers if reverse else self.producers
        for name in reversed(self.order) if reverse else self.order:
            if start(name) or (satisfied(name) and fathers[name] & marked):
                marked.add(name)


def half_ops(graph: Graph) -> Set[str]:
    """The ops the pass runs in half precision (its white set), as on CUDA."""
    edges = _Edges(graph)

    def listed(names):
        return lambda n: graph.op(n).type in names

    allowed = {n for n, op in graph.ops.items() if op.outputs}
    upstream_black_gray: Set[str] = set()
    edges.sweep(True, listed(BLACK | GRAY), listed(CLEAR), upstream_black_gray)
    black: Set[str] = set()
    edges.sweep(False, listed(BLACK), lambda n: n in upstream_black_gray, black)
    gray_or_clear = listed(GRAY | CLEAR)

    upstream_white: Set[str] = set()
    edges.sweep(
        True,
        lambda n: (
            n in allowed and (listed(WHITE)(n) or (not edges.consumers[n] and gray_or_clear(n)))
        ),
        lambda n: n not in black and n in allowed and gray_or_clear(n),
        upstream_white,
    )
    white: Set[str] = set()
    edges.sweep(
        False, lambda n: n in allowed and listed(WHITE)(n), lambda n: n in upstream_white, white
    )
    for reverse in (False, True):  # through clear ops, downward then upward
        edges.sweep(
            reverse,
            lambda n: False,
            lambda n: n not in white and n not in black and listed(CLEAR)(n) and n in allowed,
            white,
        )
    return white


def amp_graph(graph: Graph, dtype: str) -> Graph:
    """`graph` (traced in float32) in mixed precision with `dtype` (fp16, bf16) as the pass makes
    it: half ops' float outputs in half, and the casts it inserts (see the module doc)."""
    if dtype not in HALF:
        raise ConfigError(f"mixed precision dtype must be one of fp16, bf16, not {dtype!r}")
    halves = [t.lbn for t in graph.tensors.values() if t.dtype in ("float16", "bfloat16")]
    if halves:
        raise ConfigError(
            f"graph {graph.name} is already in mixed precision ({halves[0]} is "
            f"{graph.tensor(halves[0]).dtype}): trace it in float32 to cost it with another dtype"
        )
    half = HALF[dtype]
    white = half_ops(graph)
    tensors = {
        lbn: replace(
            t, consumers=[], dtype=half if t.producer in white and t.dtype == "float32" else t.dtype
        )
        for lbn, t in graph.tensors.items()
    }
    ops = {n: op for n, op in graph.ops.items()}
    position = {n: i for i, n in enumerate(graph.ops)}
    before: Dict[str, List[Op]] = {}
    for lbn, t in graph.tensors.items():
        if t.dtype != "float32":
            continue
        producer_half = t.producer in white
        readers = [
            (c, ibn)
            for c, ibn in t.consumers
            if (c in white) != producer_half and (graph.op(c).type, ibn) not in NO_CAST
        ]
        if not readers:
            continue
        suffix, out_dtype = ("cast_h2f", "float32") if producer_half else ("cast_f2h", half)
        name = f"{lbn.replace('/', '-')}-{suffix}"
        out = f"{name}/out_0"
        producer = graph.op(t.producer)
        tensors[out] = Tensor(out, t.shape, out_dtype, name, "out_0")
        role = "backward" if producer.role == "backward" else "forward"
        cast = Op(
            name,
            "cast",
            {"in_0": lbn},
            {"out_0": out},
            producer.placement,
            {"dtype": out_dtype},
            role,
            module_scope(name),
        )
        first = min((c for c, _ in readers), key=position.__getitem__)
        before.setdefault(first, []).append(cast)
        for c, ibn in readers:
            op = ops[c]
            ops[c] = replace(op, inputs={**op.inputs, ibn: out})
    ordered: List[Op] = []
    for name in graph.ops:
        ordered += before.get(name, [])
        ordered.append(ops[name])
    return Graph(graph.name, ordered, tensors.values())
