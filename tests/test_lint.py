"""The project's lint and format settings (pyproject.toml [tool.ruff]) hold everywhere."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_check_finds_nothing():
    subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, check=True)


def test_ruff_format_changes_nothing():
    subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, check=True)
