#!/usr/bin/env bash
# Run a script on N local OneFlow ranks in the project environment, on a free port.
#   ci/launch.sh 4 examples/gpt.py --mesh 2x2
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 2 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: ci/launch.sh NPROC SCRIPT [ARGS...]" >&2
  exit 2
fi
nproc="$1"; shift
py="$("$root/ci/bootstrap.sh" | tail -n1)"
port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
exec "$py" -m oneflow.distributed.launch --nproc_per_node "$nproc" --master_port "$port" "$@"
