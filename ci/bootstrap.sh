#!/usr/bin/env bash
# Make (once) the project-local environment .venv/ with OneFlow 0.9.0 and this package.
# Idempotent: a stamp of the inputs below makes a second run return in about a second.
# Prints the environment's python path on its last line of stdout.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.autoddl-bootstrap"
inputs=("$root/pyproject.toml" "$root/ci/requirements.txt" "$root/ci/bootstrap.sh" "$root/ci/cuda_libs_preload.py")

log() { echo "[bootstrap] $*" >&2; }

fingerprint() { cat "${inputs[@]}" | sha256sum | cut -d' ' -f1; }

# OneFlow 0.9.0 has wheels for CPython 3.7-3.10 only; prefer the newest.
usable() { "$1" -c 'import sys, venv; assert (3, 7) <= sys.version_info[:2] <= (3, 10)' >/dev/null 2>&1; }

find_python() {
  local minor cand
  for minor in 10 9 8 7; do
    cand="$(command -v "python3.$minor" || true)"
    if [[ -n "$cand" ]] && usable "$cand"; then echo "$cand"; return; fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    local pyroot ver
    pyroot="$(pyenv root)"
    for minor in 10 9 8 7; do
      ver="$(pyenv versions --bare 2>/dev/null | grep -E "^3\.$minor\.[0-9]+$" | sort -t. -k3 -n | tail -n1 || true)"
      cand="$pyroot/versions/$ver/bin/python"
      if [[ -n "$ver" ]] && usable "$cand"; then echo "$cand"; return; fi
    done
  fi
  cat >&2 <<MSG
[bootstrap] error: no CPython 3.7-3.10 found (OneFlow 0.9.0 has wheels for those only).
[bootstrap] Install one, e.g. 'pyenv install 3.10.13' or your distribution's python3.10
[bootstrap] (with its venv module), then run this again.
MSG
  exit 1
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$(fingerprint)" && -x "$venv/bin/python" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

py="$(find_python)"
log "using $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
if [[ ! -x "$venv/bin/python" ]]; then
  "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"
"$vpy" -m pip install --quiet --upgrade "pip>=23" >&2
log "installing OneFlow 0.9.0 and the project (first run downloads about 1.5 GB)"
"$vpy" -m pip install --quiet -r "$root/ci/requirements.txt" -e "$root[test]" >&2
# flowvision 0.2.1's sdist needs wheel and six at build time (installed above); its other
# requirements (numpy, pillow, rich, tabulate) come with OneFlow and this package.
"$vpy" -m pip install --quiet --no-deps --no-build-isolation "flowvision==0.2.1" >&2

# Put nvidia/*/lib on the loader path for every interpreter of this environment.
site="$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$root/ci/cuda_libs_preload.py" "$site/_autoddl_cuda_libs_preload.py"
echo "import _autoddl_cuda_libs_preload" > "$site/_autoddl_cuda_libs_preload.pth"

"$vpy" -c 'import oneflow, oneflow_autoddl, flowvision' >&2
fingerprint > "$stamp"
log "environment ready: $vpy"
echo "$vpy"
