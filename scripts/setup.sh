#!/usr/bin/env bash
# Create .venv and install CPU PyTorch, then the project (editable) with the extras asked for:
#
#   bash scripts/setup.sh                  # test and ray extras (the default)
#   bash scripts/setup.sh demo             # only what `probe app`'s first screen needs (scripts/demo.sh)
#   bash scripts/setup.sh test,ray,docs    # any comma-separated extras of pyproject.toml, in one resolution
#
# The installer is uv (installed from PyPI into .venv by this script: one resolution, parallel downloads); where
# it cannot be had, pip does everything as before. torch is resolved once, by pip, whose configuration knows
# where the CPU build lies (a local wheel, an index): a plain `torch` resolved from PyPI would be a multi-GB CUDA
# build. uv then installs exactly the wheel file pip chose (when that is a local file) and is held to the
# installed torch by a constraint on its exact version (2.13.0+cpu), so it never resolves torch itself.
# PROBE_SETUP_PIP=1 makes pip do everything. Safe to run again: it installs only what is missing. One line per
# step; an installer's output only on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-test,ray}"
TORCH="2.13.0"
step() { printf 'setup: %s\n' "$*"; }
pip_quiet() { python -m pip install -q --disable-pip-version-check --progress-bar off "$@"; }
# "2.13.0+cpu" for an installed distribution, "" for a missing one
version_of() { python -c 'import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: print("")' "$1"; }
torch_ok() { case "$(version_of torch)" in "$TORCH" | "$TORCH"+*) return 0 ;; *) return 1 ;; esac; }

if [ ! -x .venv/bin/python ]; then
    step "creating .venv"
    python3 -m venv .venv
fi
. .venv/bin/activate
UV=.venv/bin/uv
if [ ! -x "$UV" ] && [ "${PROBE_SETUP_PIP:-0}" != 1 ]; then
    step "installing uv (the installer)"
    # fail fast where PyPI cannot be reached: pip then does everything
    pip_quiet --retries 1 --timeout 20 uv 2>/dev/null || step "uv could not be installed: pip installs everything"
fi

# PYTHONWARNINGS: setuptools' informational "Editable installation … be careful with folders named like your
# package" banner (the import finder that maps app/ to probe_app) is not a problem of the install; errors print
export PYTHONWARNINGS=ignore

with_pip() {
    step "updating pip"
    pip_quiet --upgrade pip
    step "installing torch $TORCH (CPU)"
    pip_quiet "torch==$TORCH"
    step "installing probe with its ${EXTRAS} extras (editable, pip)"
    pip_quiet -e ".[$EXTRAS]"
}

if [ ! -x "$UV" ] || [ "${PROBE_SETUP_PIP:-0}" = 1 ]; then
    with_pip
else
    # UV_COMPILE_BYTECODE: .pyc files of the whole environment written at install, as pip does (uv leaves them
    # to the first import, which never writes them where PYTHONDONTWRITEBYTECODE is set: every start of torch
    # would compile it again). scripts/demo.sh sets it to 0 for the first screen's install: the app's imports
    # compile only what they need, and the extras' install afterwards compiles the rest.
    export UV_PYTHON="$PWD/.venv/bin/python" UV_NO_PROGRESS=1 UV_COMPILE_BYTECODE="${UV_COMPILE_BYTECODE:-1}"
    torch_wheel=()
    if ! torch_ok; then  # the wheel pip would install (its configuration: find-links, index, constraints)
        step "finding torch $TORCH (CPU) where pip's configuration puts it"
        # a local file's path (the URL's %2B decoded), else the URL
        where=$(python -m pip install -q --disable-pip-version-check --dry-run --no-deps --ignore-installed \
                  --report - "torch==$TORCH" 2>/dev/null | python -c 'import json, sys, urllib.parse, urllib.request
url = json.load(sys.stdin)["install"][0]["download_info"]["url"]
print(urllib.request.url2pathname(urllib.parse.urlparse(url).path) if url.startswith("file:") else url)' \
                  2>/dev/null) || where=""  # pip's own message, if any, comes with the install below
        if [ -f "$where" ]; then
            torch_wheel=("$where")  # a local CPU wheel: uv installs that very file
        else
            step "installing torch $TORCH (CPU) with pip"
            pip_quiet "torch==$TORCH"
        fi
    fi
    constraint=()
    if [ ${#torch_wheel[@]} -eq 0 ]; then  # torch is installed: uv is held to that very build
        torch_ok || { echo "setup: torch $TORCH is not installed" >&2; exit 1; }
        echo "torch==$(version_of torch)" >.venv/torch-constraint.txt  # e.g. torch==2.13.0+cpu
        constraint=(--constraint .venv/torch-constraint.txt)
    fi
    step "installing probe with its ${EXTRAS} extras (editable, uv)"
    if ! "$UV" pip install -q "${constraint[@]}" "${torch_wheel[@]}" -e ".[$EXTRAS]"; then
        step "uv failed (its message above): pip installs instead"
        with_pip
    fi
fi
torch_ok || { echo "setup: torch is $(version_of torch), not $TORCH (CPU)" >&2; exit 1; }
step "done: . .venv/bin/activate, then probe --help"
