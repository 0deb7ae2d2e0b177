#!/usr/bin/env bash
# Run the test suite in the project environment (made on first use by ci/bootstrap.sh).
# Extra arguments go to pytest, e.g. `ci/test.sh -k sbp -x`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$("$root/ci/bootstrap.sh" | tail -n1)"
cd "$root"
exec "$py" -m pytest "$@"
