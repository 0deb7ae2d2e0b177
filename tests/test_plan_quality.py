"""AutoDDL is no slower than the fastest expert plan that fits, on clusters we do not have."""

import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)


def test_autoddl_no_worse_than_the_best_fitting_baseline():
    from plan_quality import QUICK, row

    for case in QUICK:
        r = row(*case)
        print(
            f"\n{case}: AutoDDL {r['autoddl_s']:.4g} s/step, "
            f"best fitting baseline {r['best_fitting_baseline_s']}"
        )
        assert r["autoddl_no_worse"], r
