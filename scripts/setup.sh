#!/usr/bin/env bash
# Create .venv and install the project with its test extras. CPU torch goes first: a plain `torch` requirement
# resolved first would pull a multi-GB CUDA build. Safe to run again (it only installs what is missing).
# One line per step; pip's own output only when something fails (it is quiet, and errors still print).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf 'setup: %s\n' "$*"; }
pip_quiet() { python -m pip install -q --disable-pip-version-check --progress-bar off "$@"; }
if [ ! -x .venv/bin/python ]; then
    step "creating .venv"
    python3 -m venv .venv
fi
. .venv/bin/activate
step "updating pip"
pip_quiet --upgrade pip
step "installing torch 2.13.0 (CPU)"
pip_quiet "torch==2.13.0"
step "installing probe with its test and ray extras (editable)"
# PYTHONWARNINGS: setuptools' informational "Editable installation … be careful with folders named like your
# package" banner (the import finder that maps app/ to probe_app) is not a problem of the install; errors print
PYTHONWARNINGS=ignore pip_quiet -e ".[test,ray]"  # ray: the scale-out tests run in CI too
step "done: . .venv/bin/activate, then probe --help"
