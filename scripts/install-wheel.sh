#!/usr/bin/env bash
# Build the tfboot wheel and install it into the test environments (rerun after editing bootstrap/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rm -rf dist
.venv/bin/python -m pip wheel -q --no-deps -w dist .
for env in .venv .venv-nightly .venv-jax-* .venv-tf-*; do
    if [ -x "$env/bin/python" ]; then
        "$env/bin/python" -m pip install -q --force-reinstall --no-deps dist/tfboot-*.whl
    fi
done
