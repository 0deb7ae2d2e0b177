"""Build small IR graphs by hand, for planner tests that need no OneFlow."""

from typing import Dict, Optional, Sequence, Tuple

from oneflow_autoddl.ir import Graph, Op, Placement, Tensor, module_scope
from oneflow_autoddl.mesh import mesh_size
from oneflow_autoddl.sbp import B, NdSbp, S, Signature


class Kit:
    def __init__(self, mesh: Sequence[int] = (2,), device: str = "cpu"):
        self.mesh = tuple(mesh)
        self.place = Placement(device, tuple(range(mesh_size(self.mesh))), self.mesh)
        self.ops, self.tensors = [], []

    def _add(
        self,
        name: str,
        type_: str,
        inputs: Dict[str, str],
        outputs: Dict[str, Tuple[int, ...]],
        attrs: Optional[dict] = None,
        role: str = "forward",
        native: Optional[Dict[str, NdSbp]] = None,
        dtype: str = "float32",
    ) -> Dict[str, str]:
        outs = {}
        for bn, shape in outputs.items():
            lbn = f"{name}/{bn}"
            self.tensors.append(Tensor(lbn, tuple(shape), dtype, name, bn))
            outs[bn] = lbn
        self.ops.append(
            Op(
                name,
                type_,
                dict(inputs),
                outs,
                self.place,
                dict(attrs or {}),
                role,
                module_scope(name),
                Signature(native) if native else None,
            )
        )
        return outs

    def input(self, name: str, shape, sbp: Optional[NdSbp] = None, dtype: str = "float32") -> str:
        nd = sbp or (S(0),) * len(self.mesh)
        return self._add(
            name, "input_conf", {}, {"out": shape}, role="io", native={"out": nd}, dtype=dtype
        )["out"]

    def variable(self, name: str, shape) -> str:
        return self._add(name, "variable_conf", {}, {"out": shape}, role="variable")["out"]

    def op(
        self,
        name: str,
        type_: str,
        inputs: Dict[str, str],
        outputs: Dict[str, Sequence[int]],
        **attrs,
    ) -> Dict[str, str]:
        return self._add(name, type_, inputs, {bn: tuple(s) for bn, s in outputs.items()}, attrs)

    def shape(self, lbn: str) -> Tuple[int, ...]:
        return next(t.shape for t in self.tensors if t.lbn == lbn)

    def output(self, name: str, lbn: str) -> None:
        nd = (B,) * len(self.mesh)
        self._add(
            name,
            "output_conf",
            {"in": lbn},
            {"out": self.shape(lbn)},
            role="io",
            native={"in": nd, "out": nd},
        )

    def graph(self, name: str = "kit") -> Graph:
        return Graph(name, self.ops, self.tensors)

    # -- layers --------------------------------------------------------------------------------
    def linear(self, scope: str, x: str, out_features: int, bias: bool = True) -> str:
        shape = self.shape(x)
        w = self.variable(f"{scope}.weight", (out_features, shape[-1]))
        mm = "matmul" if len(shape) == 2 else "broadcast_matmul"
        y = self.op(
            f"{scope}-{mm}-{len(self.ops)}",
            mm,
            {"a_0": x, "b_0": w},
            {"out_0": shape[:-1] + (out_features,)},
            transpose_a=False,
            transpose_b=True,
        )["out_0"]
        if bias:
            b = self.variable(f"{scope}.bias", (out_features,))
            y = self.op(
                f"{scope}-broadcast_add-{len(self.ops)}",
                "broadcast_add",
                {"x_0": y, "y_0": b},
                {"z_0": self.shape(y)},
            )["z_0"]
        return y

    def unary(self, scope: str, type_: str, x: str) -> str:
        out = {"relu": "y_0", "gelu": "out_0"}[type_]
        return self.op(
            f"{scope}-{type_}-{len(self.ops)}",
            type_,
            {"x_0" if type_ == "relu" else "in_0": x},
            {out: self.shape(x)},
        )[out]

    def add(self, scope: str, a: str, b: str) -> str:
        return self.op(
            f"{scope}-add_n-{len(self.ops)}",
            "add_n",
            {"in_0": a, "in_1": b},
            {"out_0": self.shape(a)},
        )["out_0"]
