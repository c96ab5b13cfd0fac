#!/usr/bin/env bash
# Fill the image build context's wheels/ directory: the tfboot wheel built from this checkout,
# plus its dependency python-dotenv, so `docker build` needs no network.
#
# Usage: docker/prepare-wheels.sh [OUT_DIR]     (default: docker/wheels)
# Environment: PYTHON  the interpreter whose pip builds the wheels (default python3)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$repo/docker/wheels}"
python="${PYTHON:-python3}"

mkdir -p "$out"
rm -f "$out"/tfboot-*.whl
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$repo"
"$python" -m pip download --quiet --only-binary=:all: --dest "$out" "python-dotenv>=1.0"
ls -1 "$out"
