#!/usr/bin/env bash
# The GPU check in one command, for the day a CUDA device is lent (never in CI): the gpu-marked tests and the
# capture benchmark at N = 1K, 4K, 16K and 32K against the plain sdpa forward (flash), then one summary, all
# within 8 minutes: every stage has a hard time limit inside one overall budget (benchmarks/gpu.py).
# docs/benchmarks.md, "GPU check", says what it checks.
#
#   bash benchmarks/gpu.sh              # on a machine with CUDA; exit 0 only when every stage is ok
#   bash benchmarks/gpu.sh --dry-run    # the same plumbing on a CPU, in well under a minute on a quiet machine:
#                                       # tiny lengths, one layer, the CUDA-only parts skipped (also
#                                       # PROBE_GPU_DRY_RUN=1; tests/project/test_gpu_script.py runs it)
#
# Python: $PROBE_GPU_PYTHON, else .venv/bin/python, else python3: the first whose torch sees a CUDA device (a
# dry run: the first with torch). Nothing is installed into it; the repository goes on PYTHONPATH. A module the
# GPU stages import that it lacks is installed into .gpu-site/ (pip --target, never torch) from the wheels in
# .whl/ when that folder is there (carried to a machine without a registry), else from the registry, within a
# time limit; what still fails to import is named in the summary.
set -uo pipefail
cd "$(dirname "$0")/.."
dry=0
[ "${1:-}" = --dry-run ] && dry=1
[ "${PROBE_GPU_DRY_RUN:-0}" = 1 ] && dry=1
# seconds for everything: 8 minutes with a margin (a dry run's limits are wide: it checks plumbing, not speed)
budget=${PROBE_GPU_BUDGET:-$([ "$dry" = 1 ] && echo 1200 || echo 470)}
started=$(date +%s)
say() { printf 'gpu.sh: %s\n' "$*" >&2; }

# --- stage python: the interpreter (at most 60 s) ---------------------------------------------------------
if [ "$dry" = 1 ]; then  # found, not imported: the dry run's other stages import it
    want='import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'
else
    want='import torch, sys; sys.exit(not torch.cuda.is_available())'
fi
python=""
for candidate in "${PROBE_GPU_PYTHON:-}" .venv/bin/python python3; do
    [ -n "$candidate" ] && command -v "$candidate" >/dev/null || continue
    if timeout 60 "$candidate" -c "$want" 2>/dev/null; then python=$(command -v "$candidate"); break; fi
done
if [ -z "$python" ]; then
    printf '\nGPU check: NOT run: no Python here has torch%s (tried: %s .venv/bin/python python3);\n' \
        "$([ "$dry" = 1 ] || echo ' that sees a CUDA device')" "${PROBE_GPU_PYTHON:-}"
    printf 'set PROBE_GPU_PYTHON to one that has, or install CUDA PyTorch.\n'
    exit 1
fi
python_seconds=$(( $(date +%s) - started ))

# --- stage needs: what the GPU stages import (at most 120 s of installing) ---------------------------------
export PYTHONPATH="$PWD:$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
modules="transformers tokenizers safetensors accelerate numpy scipy tqdm pytest"
missing=$("$python" -c 'import importlib.util, sys
print(" ".join(name for name in sys.argv[1:] if importlib.util.find_spec(name) is None))' $modules 2>/dev/null)
needs_status=ok
installed=""
if [ -n "$missing" ]; then
    # module -> distribution names where they differ
    distributions=$(printf '%s\n' $missing | sed 's/^sklearn$/scikit-learn/')
    say "installing what $python lacks: $missing"
    if [ -d .whl ]; then source_args=(--no-index --find-links .whl); else source_args=(); fi
    if timeout 120 "$python" -m pip install -q --disable-pip-version-check --retries 0 --timeout 10 --no-deps \
            --target .gpu-site \
            "${source_args[@]}" $distributions >&2; then
        installed=" (installed into .gpu-site: $missing)"
    fi
    still=$("$python" -c 'import importlib.util, sys
print(" ".join(name for name in sys.argv[1:] if importlib.util.find_spec(name) is None))' $missing 2>/dev/null)
    [ -n "$still" ] && needs_status="failed (missing: $still)"
fi
needs_seconds=$(( $(date +%s) - started - python_seconds ))
left=$(( budget - $(date +%s) + started ))
version=$("$python" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null)
args=(--budget "$left" --environment "$python (Python $version)$installed"
      --stage "python=ok=$python_seconds" --stage "needs=$needs_status=$needs_seconds")
[ "$dry" = 1 ] && args+=(--dry-run)
exec "$python" benchmarks/gpu.py "${args[@]}"
