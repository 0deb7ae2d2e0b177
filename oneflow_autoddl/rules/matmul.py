"""The matmul family (matmul_op.cpp at v0.9.0): signatures, FLOPs and what it contracts."""

import math

from ..sbp import B, P, S
from .registry import Contraction, OpView, rule


def _out(v, sbp):
    out = {"out_0": sbp}
    if v.has("_add_to_output_0"):
        out["_add_to_output_0"] = sbp
    return out


def _five(v, m, ka, kb, n, out_m, out_n):
    return [
        {"a_0": S(m), "b_0": B, **_out(v, S(out_m))},
        {"a_0": B, "b_0": S(n), **_out(v, S(out_n))},
        {"a_0": S(ka), "b_0": S(kb), **_out(v, P)},
        {"a_0": P, "b_0": B, **_out(v, P)},
        {"a_0": B, "b_0": P, **_out(v, P)},
    ]


def _k_axes(v, na, nb):
    """(m, ka) of a and (kb, n) of b from the transpose flags."""
    m, ka = (na - 1, na - 2) if v.attr("transpose_a", False) else (na - 2, na - 1)
    kb, n = (nb - 1, nb - 2) if v.attr("transpose_b", False) else (nb - 2, nb - 1)
    return m, ka, kb, n


def contraction(v: OpView) -> Contraction:
    """a [..., m, k] times b [..., k, n] (as the transpose flags read them); a 2-D b under a
    batched a (a linear layer) is one product over all of a's rows."""
    a, b, out = v.shape("a_0"), v.shape("b_0"), v.shape("out_0")
    m, ka, kb, n = _k_axes(v, len(a), len(b))
    if len(b) == 2 and len(a) > 2:
        return Contraction(1, math.prod(out[:-1]), a[ka], out[-1], None, (kb, n))
    return Contraction(math.prod(out[:-2]), out[-2], a[ka], out[-1], (m, ka), (kb, n))


def grad_b_contraction(v: OpView) -> Contraction:
    """out [k, n] = a^T b summed over the rows a [..., k] and b [..., n] share."""
    out = v.shape("out_0")
    return Contraction(1, out[0], math.prod(v.shape("a_0")[:-1]), out[1])


def matmul_flops(attrs, local):
    """2 * out elements * the contracted length (read from a)."""
    a, out = local["a_0"], local["out_0"]
    k = a[-2] if attrs.get("transpose_a", False) else a[-1]
    n_out = 1
    for d in out:
        n_out *= d
    return 2.0 * n_out * k


@rule("matmul", flops=matmul_flops, contraction=contraction)
def matmul(v):
    m, ka, kb, n = _k_axes(v, 2, 2)
    return _five(v, m, ka, kb, n, 0, 1)


@rule("batch_matmul", flops=matmul_flops, contraction=contraction)
def batch_matmul(v):
    nd = v.ndim("a_0")
    m, ka, kb, n = _k_axes(v, nd, nd)
    batch = [{"a_0": S(i), "b_0": S(i), **_out(v, S(i))} for i in range(nd - 2)]
    return batch + _five(v, m, ka, kb, n, nd - 2, nd - 1)


@rule("broadcast_matmul", flops=matmul_flops, contraction=contraction)
def broadcast_matmul(v):
    a, b = v.shape("a_0"), v.shape("b_0")
    na, nb = len(a), len(b)
    full = max(na, nb)
    nbatch = full - 2
    pa, pb = nbatch - (na - 2), nbatch - (nb - 2)
    sigs = []
    for i in range(nbatch):
        abd = 1 if i < pa else a[i - pa]
        bbd = 1 if i < pb else b[i - pb]
        if abd == bbd and abd != 1:
            sigs.append({"a_0": S(i - pa), "b_0": S(i - pb), **_out(v, S(i))})
        elif abd == 1 and bbd != 1:
            sigs.append({"a_0": B, "b_0": S(i - pb), **_out(v, S(i))})
        elif bbd == 1 and abd != 1:
            sigs.append({"a_0": S(i - pa), "b_0": B, **_out(v, S(i))})
    m, ka, kb, n = _k_axes(v, na, nb)
    return sigs + _five(v, m, ka, kb, n, full - 2, full - 1)


def grad_b_flops(attrs, local):
    """out [K, N] = sum over a's leading rows of a^T b: 2 * K * N * rows."""
    a, out = local["a_0"], local["out_0"]
    rows = 1
    for d in a[:-1]:
        rows *= d
    return 2.0 * out[0] * out[1] * rows


@rule("broadcast_matmul_grad_b", flops=grad_b_flops, contraction=grad_b_contraction)
def broadcast_matmul_grad_b(v):
    last = v.ndim("a_0") - 1
    sigs = [{"a_0": S(i), "b_0": S(i), **_out(v, P)} for i in range(last)]
    return sigs + [
        {"a_0": S(last), "b_0": B, **_out(v, S(0))},
        {"a_0": B, "b_0": S(last), **_out(v, S(1))},
    ]
