#!/usr/bin/env bash
# Set up, then open the dashboard (offline) at http://127.0.0.1:8050: the real pretrained all-MiniLM-L6-v2 on an
# English paragraph with its shipped labels first, beside the bundled model organisms. Start-up computes nothing
# for a model shipped with a label table; any other is labelled in the background (progress in this terminal).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec probe app "$@"
