"""The project's lint and format settings (pyproject.toml [tool.ruff]) hold everywhere."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ruff_check_finds_nothing():
    subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, check=True)


def test_the_planner_half_type_checks():
    """mypy over oneflow_autoddl but the adapter (pyproject.toml [tool.mypy])."""
    subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, check=True)


def test_ruff_format_changes_nothing():
    subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, check=True)


def _sources(*dirs):
    for d in dirs:
        for here, _, files in os.walk(os.path.join(ROOT, d)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(here, name)
                    with open(path) as f:
                        yield os.path.relpath(path, ROOT), f.read()


def test_no_sys_path_edits_and_the_package_never_imports_examples():
    """Modules import each other as packages (run from the repository root), never by editing
    sys.path; the package stands alone, without the repository's examples/."""
    everything = list(_sources("oneflow_autoddl", "tests", "benchmarks", "examples", "tools"))
    assert len(everything) > 50
    for path, text in everything:
        assert re.search(r"sys\.path\.(insert|append)\(", text) is None, path
    for path, text in _sources("oneflow_autoddl"):
        assert re.search(r"^\s*(from|import) examples\b", text, re.M) is None, path
