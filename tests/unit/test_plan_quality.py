"""AutoDDL is no slower than the fastest expert plan that fits, on clusters we do not have."""


def test_autoddl_no_worse_than_the_best_fitting_baseline():
    from benchmarks.plan_quality import QUICK, row

    for case in QUICK:
        r = row(*case)
        print(
            f"\n{case}: AutoDDL {r['autoddl_s']:.4g} s/step, "
            f"best fitting baseline {r['best_fitting_baseline_s']}"
        )
        assert r["autoddl_no_worse"], r
