#!/usr/bin/env bash
# Build the user guide and the API reference (mkdocs.yml, docs/) into site/, or OUT_DIR, with
# mkdocs and mkdocstrings; --strict: every warning (a docstring griffe cannot parse, a broken link) fails it.
# Usage: bash scripts/docs.sh [OUT_DIR]   (needs the docs extra, which scripts/setup.sh test installs)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/mkdocs ]; then
  echo "docs: .venv has no mkdocs: bash scripts/setup.sh test, or .venv/bin/python -m pip install -e '.[docs]'" >&2
  exit 1
fi
out=${1:-site}
start=$(date +%s)
.venv/bin/mkdocs build --strict --clean --config-file mkdocs.yml --site-dir "$out"
echo "docs: $out/index.html ($(( $(date +%s) - start )) s)"
