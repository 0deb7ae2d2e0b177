"""benchmarks.zoo's rows: sign-test verdicts per pair, losses against data parallel's (the first
LOSS_STEPS steps), and the issue's checks on the AutoDDL row (no ranks; rows as
compare_plans.combine gives them)."""

from benchmarks.zoo import rows_of, verdict


def row(plan, program, rounds, sent=1e6, losses=(2.3, 2.2, 2.1, 2.0, 0.01), **extra):
    return {
        "model": "resnet18",
        "mesh": "2",
        "plan": plan,
        "program": program,
        "block_step_s": rounds,
        "measured_step_s": sorted(rounds)[len(rounds) // 2],
        "predicted_step_s": 0.1,
        "measured_bytes": sent,
        "predicted_bytes": sent,
        "first_call_s": 3.0,
        "search_time_s": extra.get("search_time_s", 0.5),
        "native_pass_s": extra.get("native_pass_s"),
        "no_rule": extra.get("no_rule", {}),
        "losses": list(losses),
        "note": "",
        "reordered_losses": extra.get("reordered_losses"),
    }


DP = [0.40 + 0.01 * (k % 3) for k in range(12)]


def test_verdict_needs_the_sign_test_and_names_one_program():
    fast = row("autoddl", "b", [t - 0.05 for t in DP])
    assert verdict(fast, row("dp", "a", DP)) == "faster 12/12"
    assert verdict(row("dp", "a", DP), fast) == "slower 0/12"
    assert verdict(row("x", "b", DP[:4]), row("y", "a", [t + 1 for t in DP[:4]])) == "n.s. 4/4"
    assert verdict(row("native", "b", DP), fast) == "same program"


def test_rows_hold_the_verdicts_losses_and_the_issues_misses():
    group = [
        row("dp", "a", DP),
        row("native", "c", [t - 0.10 for t in DP], sent=1e6, native_pass_s=2.0),
        row(
            "autoddl",
            "b",
            [t - 0.05 for t in DP],
            sent=2e6,
            losses=(2.3, 2.21, 2.1, 2.0, 0.01),
            search_time_s=3.0,
            no_rule={"roll": 2, "concat": 1},
        ),
    ]
    dp, native, auto = rows_of(group)
    assert dp["vs_dp"] == "-" and dp["vs_native"] == "slower 0/12"
    assert native["native_pass_s"] == dp["native_pass_s"] == 2.0
    assert auto["vs_dp"] == "faster 12/12" and auto["vs_native"] == "slower 0/12"
    assert auto["no_rule"] == "concat (1), roll (2)" and dp["no_rule"] == "-"
    assert dp["losses_equal_dp"] and native["losses_equal_dp"] and not auto["losses_equal_dp"]
    assert dp["steps_equal_dp"] == "5/5" and auto["steps_equal_dp"] == "1/5"
    assert auto["planning_s"] == 3.0 and native["planning_s"] is None
    assert auto["misses"] == (
        "slower than native, more bytes than native, not faster, "
        "plans slower than the native pass, losses off data parallel's"
    )
    assert dp["misses"] == native["misses"] == ""


def test_an_autoddl_row_that_wins_misses_nothing():
    group = [
        row("dp", "a", DP),
        row("native", "c", [t + 0.10 for t in DP], sent=1e6, native_pass_s=2.0),
        row(
            "autoddl",
            "b",
            [t - 0.05 for t in DP],
            sent=3e6,
            losses=(2.3, 2.2, 2.1, 2.0, 0.0101),
            search_time_s=1.0,
        ),
    ]
    auto = rows_of(group)[2]
    assert auto["misses"] == "none" and auto["losses_equal_dp"] and auto["steps_equal_dp"] == "4/5"
    assert abs(auto["loss_rel_diff_all_steps"] - 0.01) < 1e-9


def test_losses_are_off_only_before_summation_order_alone_moves_them():
    """Data parallel on a reordered batch leaving its own losses at step 2 excuses a plan that
    leaves them at step 2, not one that leaves them at step 1."""
    dp_losses = (2.3, 2.2, 2.1, 2.0, 0.01)
    reordered = (2.3, 2.2, 2.15, 2.0, 0.01)

    def misses_with(autoddl_losses):
        group = [
            row("dp", "a", DP, losses=dp_losses, reordered_losses=reordered),
            row("native", "c", DP, native_pass_s=2.0),
            row("autoddl", "c", DP, losses=autoddl_losses, search_time_s=1.0),
        ]
        return rows_of(group)

    dp, _, auto = misses_with((2.3, 2.2, 2.12, 2.0, 0.01))
    assert auto["misses"] == "none" and dp["reordered_steps_equal_dp"] == "2/5"
    assert auto["reordered_steps_equal_dp"] == ""
    _, _, auto = misses_with((2.3, 2.25, 2.1, 2.0, 0.01))
    assert auto["misses"] == "losses off data parallel's"


def test_a_model_whose_ranks_fail_costs_its_own_rows_not_the_runs(monkeypatch):
    """Swin-tiny at 224 px outgrew this machine's memory and its SIGKILL ended a 20-minute run
    with no rows at all: the other models' rows are kept, the failed launch named with the
    error its ranks raised."""
    from benchmarks import zoo
    from oneflow_autoddl.launch import RankFailure

    def measure(model, mesh, *args):
        if model == "swin_tiny_patch4_window7_224":
            raise RankFailure(
                "benchmarks.rank_bench:measure on 2 ranks exited with 1:\nTraceback\n  ...\n"
                "MemoryError: std::bad_alloc\nsubprocess.CalledProcessError: Command ... 1.\n"
            )
        return [row(p, p, DP) for p in ("dp", "native", "autoddl")]

    monkeypatch.setattr(zoo, "measure", measure)
    rows, failed = zoo.run(["resnet18", "swin_tiny_patch4_window7_224", "alexnet"], ["2"], 12)
    assert len(rows) == 6
    assert failed == [
        "swin_tiny_patch4_window7_224 on 2: benchmarks.rank_bench:measure on 2 ranks exited "
        "with 1: MemoryError: std::bad_alloc"
    ]


def test_the_native_pass_time_is_read_from_oneflow_s_compile_log():
    """rank_bench.PASS_LOG reads the AutoParallelPass line of OneFlow 0.9.0's compile log (glog
    verbosity 1, as seen on 2 ranks), in milliseconds or seconds, and no other pass's."""
    from benchmarks.rank_bench import PASS_LOG

    line = (
        'I20261207 19:07:28.521888 20292 cost_util.h:100] [count log]{"loc":"[GraphCompile]'
        'TrainGraph_0 AutoParallelPass","mem_rss":"818.000000 MB","time_cost":"41 milliseconds"}'
    )
    other = line.replace("AutoParallelPass", "DumpVariableInfoPass")
    assert PASS_LOG.findall(line) == [("41", "milliseconds")]
    assert PASS_LOG.findall(line.replace("41 milliseconds", "2.5 seconds")) == [("2.5", "seconds")]
    assert PASS_LOG.findall(other) == []
