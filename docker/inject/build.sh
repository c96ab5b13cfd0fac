#!/usr/bin/env bash
# Build the injector image from this checkout: bash docker/inject/build.sh TAG
# Or only make its tree (/tfboot) in DIR, as the tests and bench/inject_startup.py do:
#   bash docker/inject/build.sh --tree DIR
#
# The tree is made on this machine (the tfboot wheel built from the checkout, python-dotenv
# from pip's cache or index, both unpacked with pip install --target and compiled to bytecode
# by PYTHON and every CPython 3.10 to 3.15 found on PATH), then `docker build --network none` copies it
# onto BASE_IMAGE (any image with sh and cp; default busybox:1.37).
#
# Environment: BASE_IMAGE  the base image;  PYTHON  the interpreter whose pip builds the tree
# (default python3).
set -euo pipefail

usage="usage: docker/inject/build.sh TAG | --tree DIR   (environment: BASE_IMAGE, PYTHON)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
base="${BASE_IMAGE:-busybox:1.37}"

# make_tree DIR: the injected tree, DIR/hook, DIR/site, DIR/env, DIR/licenses, DIR/*.pth
make_tree() {
    local tree="$1" wheels
    wheels="$(mktemp -d)"
    PYTHON="$python" "$repo/docker/prepare-wheels.sh" "$wheels" >/dev/null
    mkdir -p "$tree/hook" "$tree/env" "$tree/licenses"
    cp "$repo/bootstrap/tfboot/inject/hook.py" "$tree/hook/sitecustomize.py"
    # The .pth way (the annotation tfboot/site-packages): mounted into the image's site-packages.
    # Only under an interpreter tfboot runs on (CPython 3.10 and later); a line any Python parses.
    echo 'import site, sys; sys.version_info >= (3, 10) and sys.implementation.name == "cpython" and site.addsitedir("/tfboot/site")' >"$tree/tfboot-inject.pth"
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
        --no-compile --target "$tree/site" "$wheels"/*.whl
    rm -rf "$wheels"
    # No .dist-info in the tree: pip and importlib.metadata in the app's image must not take
    # the injected copies for installed packages. Their licenses are kept beside the tree.
    for info in "$tree"/site/*.dist-info; do
        find "$info" -iname 'LICENSE*' -type f \
            -exec cp {} "$tree/licenses/$(basename "$info" .dist-info).LICENSE" \;
    done
    rm -rf "$tree/site/bin" "$tree"/site/*.dist-info
    # Bytecode that is never checked against the source: the tree is read-only where it runs.
    for interpreter in "$python" python3.10 python3.11 python3.12 python3.13 python3.14 python3.15; do
        if "$interpreter" -c "" >/dev/null 2>&1; then
            "$interpreter" -m compileall -q --invalidation-mode unchecked-hash "$tree" >/dev/null
        fi
    done
    chmod -R a+rX,go-w "$tree"
}

if [ "${1:-}" = --tree ]; then
    make_tree "${2:?$usage}"
    exit 0
fi
tag="${1:?$usage}"
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
make_tree "$context/tfboot"
cp "$here/Dockerfile" "$context/Dockerfile"
version="$("$python" -c 'import re, sys; print(re.search(r"^__version__ = \"(.+)\"", open(sys.argv[1]).read(), re.M)[1])' "$repo/bootstrap/tfboot/__init__.py")"
docker build --quiet --network none --tag "$tag" --build-arg "BASE_IMAGE=$base" \
    --build-arg "TFBOOT_VERSION=$version" "$context" >/dev/null
echo "$tag"
