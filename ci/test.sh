#!/usr/bin/env bash
# Run the test suite in the project environment (made on first use by ci/bootstrap.sh), on two
# pytest-xdist workers: the tests that launch ranks one after another on one, the planner's
# modules beside them (tests/conftest.py groups them). Extra arguments go to pytest, e.g.
# `ci/test.sh -k sbp -x`; `-n 0` runs everything in one process.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$("$root/ci/bootstrap.sh" | tail -n1)"
cd "$root"
exec "$py" -m pytest -n 2 --dist loadgroup "$@"
