"""python -m oneflow_autoddl plan: any cluster from a laptop, and clear refusals."""

import json
import subprocess
import sys

import pytest

from oneflow_autoddl.cost.cluster import preset_names

GPT3 = [
    "--model",
    "gpt",
    "--layers",
    "96",
    "--hidden",
    "12288",
    "--heads",
    "96",
    "--seq-len",
    "2048",
    "--vocab",
    "50257",
    "--batch-size",
    "128",
]


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "oneflow_autoddl", *args], capture_output=True, text=True
    )


def gpt3_at_its_training_batch(tmp_path, *args):
    """Issue 19's command (GPT-3 175B at batch 1536 on 128 x 8 A100-80GB) with `args`: its
    output, and the plan it wrote, which fits."""
    path = tmp_path / "p.json"
    command = [*GPT3[:-1], "1536", "--mesh", "128x8", "--cluster", "dgx-a100", *args]
    out = cli("plan", *command, "--json", str(path))
    assert out.returncode == 0, out.stderr
    assert "| autoddl" in out.stdout and "| megatron" in out.stdout
    assert "recomputed: model.h." in out.stdout
    plan = json.loads(path.read_text())
    print(f"\nGPT-3 175B b1536 {args} on 128x8 dgx-a100: search {plan['search_time_s']:.2f} s")
    assert plan["predicted"]["peak_memory_per_device"] <= plan["memory_limit_bytes"]
    return out, plan


def test_gpt3_at_its_training_batch_fits_1024_a100s_with_recompute_in_bf16(tmp_path):
    """In mixed precision the plan recomputes the blocks, says so, fits, and is no slower than any
    expert plan that fits."""
    out, plan = gpt3_at_its_training_batch(tmp_path, "--dtype", "bf16")
    assert "precision mixed bfloat16" in out.stdout
    assert "every plan below recomputes the same 95 modules in backward" in out.stdout
    assert len(plan["recompute"]) >= 95  # the repeated blocks of 96 (search.ties)
    for name in ("data_parallel", "megatron", "zero"):
        assert plan["baselines"][name]["step_time_s"] > 0
    limit = plan["memory_limit_bytes"]
    fitting = [b for b in plan["baselines"].values() if b["peak_memory_per_device"] <= limit]
    assert all(plan["predicted"]["step_time_s"] <= b["step_time_s"] for b in fitting)


def test_gpt3_at_its_training_batch_fits_1024_a100s_in_fp32_with_recompute_and_copies(tmp_path):
    """In float32 (the command as written) recomputing the blocks alone finds no plan; with every
    parameter (and block input) read through a copy per phase, gathered where it is used as ZeRO
    stage 3 does, a plan fits, slower than Megatron-style, which does not."""
    out, plan = gpt3_at_its_training_batch(tmp_path)
    assert "precision float32" in out.stdout and "copies, one per phase" in out.stdout
    assert any("-autoddl-phase-" in name for name in plan["ops"])
    megatron = plan["baselines"]["megatron"]
    assert megatron["peak_memory_per_device"] > plan["memory_limit_bytes"]
    assert plan["predicted"]["step_time_s"] > megatron["step_time_s"]


def test_vgg16_on_a_2d_mesh(tmp_path):
    out = cli(
        "plan", "--model", "vgg16", "--mesh", "2x4", "--cluster", "dgx-h100", "--batch-size", "64"
    )
    assert out.returncode == 0, out.stderr
    assert "model.features.0.weight" in out.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "resnet"], "invalid choice: 'resnet' (choose from 'gpt', 'vgg11'"),
        (
            ["--model", "gpt", "--cluster", "tpu-v9"],
            "one of " + ", ".join(preset_names()),
        ),
        (["--model", "gpt", "--mesh", "4x"], "not of the form"),
        (
            ["--model", "gpt", "--batch-size", "6"],
            "batch 6, which mesh axis 0 of 4 (4 devices) does not divide",
        ),
        (
            ["--model", "gpt", "--memory-per-device", "20KiB", "--batch-size", "8"],
            "the least memory any plan holds at its peak is",
        ),
    ],
)
def test_bad_input_is_refused_with_the_reason(args, message):
    mesh = [] if "--mesh" in args else ["--mesh", "4"]
    out = cli(
        "plan",
        "--layers",
        "2",
        "--hidden",
        "64",
        "--heads",
        "2",
        "--seq-len",
        "16",
        "--vocab",
        "64",
        *mesh,
        *args,
    )
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_a_file_that_is_not_a_job(tmp_path):
    bad = tmp_path / "x.job"
    bad.write_bytes(b"\x00\x01 certainly not a protobuf")
    out = cli("plan", "--job", str(bad), "--mesh", "8")
    assert out.returncode != 0 and "not a serialized OneFlow Job" in out.stderr


def test_user_errors_are_reported_and_bugs_keep_their_traceback(monkeypatch, capsys):
    from oneflow_autoddl import cli as cli_module
    from oneflow_autoddl.errors import PlanningError

    args = [
        "plan",
        "--model",
        "vgg16",
        "--mesh",
        "2",
        "--image-size",
        "32",
        "--width-mult",
        "0.125",
    ]

    def refuse(*a, **k):
        raise PlanningError("give more memory")

    monkeypatch.setattr(cli_module, "plan", refuse)
    assert cli_module.main(args) == 2
    assert "error: give more memory" in capsys.readouterr().err

    def bug(*a, **k):
        raise KeyError("internal")

    monkeypatch.setattr(cli_module, "plan", bug)
    with pytest.raises(KeyError):
        cli_module.main(args)


def test_mixed_precision_is_planned_and_named(tmp_path):
    args = ["--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "4"]
    args += ["--seq-len", "64", "--vocab", "512", "--batch-size", "16", "--mesh", "4"]
    out = cli("plan", *args, "--dtype", "bf16", "--json", str(tmp_path / "p.json"))
    assert out.returncode == 0, out.stderr
    assert "precision mixed bfloat16" in out.stdout
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["precision"] == "mixed bfloat16"
    assert any(e["type"] == "cast" for e in plan["ops"].values())
