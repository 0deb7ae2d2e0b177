"""No unused imports, undefined names or dead loop variables anywhere in the project."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_finds_nothing():
    dirs = [d for d in ("oneflow_autoddl", "tests", "examples", "benchmarks") if os.path.isdir(os.path.join(ROOT, d))]
    subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F,E9,B007", *dirs], cwd=ROOT, check=True)
