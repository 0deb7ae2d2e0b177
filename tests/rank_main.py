"""Entry point of one OneFlow rank started by the test harness (tests/ranks.py).

Usage (by the harness only): rank_main.py OUT_DIR module:function JSON_KWARGS
Each rank writes its stderr to OUT_DIR/rank<r>.err and its result to OUT_DIR/rank<r>.json.
"""

import importlib
import json
import os
import sys
import traceback


def main() -> int:
    out_dir, target, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    rank = int(os.environ.get("RANK", "0"))
    err = open(os.path.join(out_dir, f"rank{rank}.err"), "w")
    os.dup2(err.fileno(), 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    module_name, func_name = target.split(":")
    try:
        result = getattr(importlib.import_module(module_name), func_name)(**kwargs)
    except BaseException:
        traceback.print_exc()
        return 1
    with open(os.path.join(out_dir, f"rank{rank}.json.tmp"), "w") as f:
        json.dump(result, f)
    os.replace(
        os.path.join(out_dir, f"rank{rank}.json.tmp"), os.path.join(out_dir, f"rank{rank}.json")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
