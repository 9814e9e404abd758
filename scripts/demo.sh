#!/usr/bin/env bash
# Set up, then open the dashboard on the bundled model organisms (offline) at http://127.0.0.1:8050
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec probe app "$@"
