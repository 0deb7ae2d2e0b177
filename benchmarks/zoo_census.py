"""Op census of the zoo: every op type in the training graphs of examples/zoo.py, with SGD
(momentum) and with AdamW, the models using it, and whether it has a rule.

    python -m benchmarks.zoo_census                  # one process, build_graph only, ~2 min
    python -m benchmarks.zoo_census --missing --models resnet18 swin_tiny_patch4_window7_224
    python -m benchmarks.zoo_census --missing --optimizers sgd --image-size 224 \
        --models pvt_tiny rexnetv1_1_0                # held-out flowvision models (any name)

A model that OneFlow or flowvision cannot trace at that size is listed with its error, not
counted.
"""

import argparse
import logging
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Set, Tuple

from tabulate import tabulate

from examples import zoo as zoo_models
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.rules import has_rule

log = logging.getLogger("zoo_census")


def census(
    models: Sequence[str], optimizers: Sequence[str], image_size: Optional[int] = None
) -> Tuple[Dict[str, Dict[str, int]], Dict[str, str]]:
    """(op type -> {model: ops of that type in its training graph, the largest over
    optimizers}, model -> why it could not be traced); `image_size` None: each model's own."""
    uses: Dict[str, Dict[str, int]] = defaultdict(dict)
    failed: Dict[str, str] = {}
    for name in models:
        for optimizer in optimizers:
            log.info("tracing %s with %s", name, optimizer)
            try:
                graph = read_job(zoo_models.trace(name, optimizer, image_size=image_size))
            except Exception as e:  # flowvision's or OneFlow's own limits, reported per model
                failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"
                break
            counts: Dict[str, int] = defaultdict(int)
            for op in graph.ops.values():
                counts[op.type] += 1
            for op_type, n in counts.items():
                uses[op_type][name] = max(n, uses[op_type].get(name, 0))
    return uses, failed


def table(uses: Dict[str, Dict[str, int]], missing_only: bool) -> str:
    rows = []
    for op_type in sorted(uses, key=lambda t: (has_rule(t), t)):
        if missing_only and has_rule(op_type):
            continue
        models = ", ".join(f"{m} ({n})" for m, n in sorted(uses[op_type].items()))
        rows.append([op_type, "yes" if has_rule(op_type) else "NO", models])
    return tabulate(rows, headers=["op type", "rule", "models (ops)"], tablefmt="github")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(zoo_models.ZOO))
    parser.add_argument("--optimizers", nargs="+", default=list(zoo_models.OPTIMIZERS))
    parser.add_argument("--missing", action="store_true", help="only op types with no rule")
    parser.add_argument("--image-size", type=int, default=None, help="default: each model's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    uses, failed = census(args.models, args.optimizers, args.image_size)
    print(table(uses, args.missing))
    missing: Set[str] = {t for t in uses if not has_rule(t)}
    traced = len(args.models) - len(failed)
    print(f"\n{traced} models traced: {len(uses)} op types, {len(missing)} with no rule")
    for name, why in failed.items():
        print(f"not traced: {name}: {why}")


if __name__ == "__main__":
    main()
