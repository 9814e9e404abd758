#!/usr/bin/env bash
# Create .venv and install the project with its test extras. CPU torch goes first: a plain `torch` requirement
# resolved first would pull a multi-GB CUDA build. Safe to run again (it only installs what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[test,ray]"  # ray: the scale-out tests run in CI too
