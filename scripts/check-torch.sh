#!/usr/bin/env bash
# On-demand compatibility check (not part of CI, which keeps the pinned torch):
#   scripts/check-torch.sh VERSION [pytest args...]
# installs torch==VERSION (or a wheel file given by its path) into a fresh virtual environment,
# installs this checkout into it, and runs the tests that compare backstep against plain PyTorch:
# gradients, output, errors and exit codes, with and without source mapping. The venv is removed
# afterwards (set KEEP_VENV=1 to keep it). Record the result in docs/setup.md's compatibility table.
# PYTHON picks the interpreter (default python3). Nothing is cached (a CUDA torch is several GB):
# PIP_NO_CACHE_DIR=1. A pip configuration that caps torch is lifted for one run with
# PIP_CONSTRAINT=/dev/null; the project is then installed against the torch just installed.
set -euo pipefail
export PIP_NO_CACHE_DIR=1
if [[ $# -lt 1 ]]; then
    echo "usage: scripts/check-torch.sh VERSION|WHEEL [pytest args...]" >&2
    exit 2
fi
want=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/backstep-check-torch.XXXXXX")
if [[ -z "${KEEP_VENV:-}" ]]; then
    trap 'rm -rf "$work"' EXIT
fi
"${PYTHON:-python3}" -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
if [[ -f "$want" ]]; then torch_spec=$want; else torch_spec="torch==$want"; fi
pip install -q "$torch_spec"
found=$(python -c 'import torch; print(torch.__version__)' 2>/dev/null)
# the project's pins, except torch's own: the torch just installed stays
grep -v '^torch' "$root/constraints.txt" > "$work/constraints.txt"
echo "torch==${found%%+*}" >> "$work/constraints.txt"
pip install -q -c "$work/constraints.txt" -e "$root[test]"
echo "check-torch: torch $found in $work/venv"
cd "$root"
if [[ $# -eq 0 ]]; then
    set -- tests/test_engine_fidelity.py tests/test_trace_cli.py tests/test_engine_events.py \
        tests/test_provenance.py tests/test_provenance_calls.py tests/test_diagnostics.py \
        tests/test_torch_floor.py tests/test_old_torch_saved.py
fi
set +e
python -m pytest -q -p no:cacheprovider "$@"
status=$?
set -e
echo "check-torch: torch $found: pytest exit status $status"
exit $status
