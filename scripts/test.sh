#!/usr/bin/env bash
# Run the whole test suite. Installs what it needs (Debian packages; the Python test
# environments: .venv, .venv-nightly and the version matrix of .venv-jax-* and .venv-tf-*),
# starts the Docker engine, builds the tfboot wheel and installs it into every
# environment, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"

say() { printf 'test.sh: %s\n' "$*" >&2; }
started=$SECONDS

# install_missing [--with-recommends] COMMAND:PACKAGE ...: the packages of missing commands
install_missing() {
    local missing=() tool recommends=--no-install-recommends
    if [ "$1" = --with-recommends ]; then recommends=; shift; fi
    for tool in "$@"; do
        command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "installing ${missing[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            $recommends "${missing[@]}"
    fi
}
install_missing --with-recommends gcc:gcc git:git  # gcc recommends libc6-dev: headers
# A real Slurm for tests/slurm/ (started and stopped by the tests themselves).
install_missing slurmctld:slurmctld slurmd:slurmd srun:slurm-client munged:munge ip:iproute2 \
    nsenter:util-linux
# Open MPI's mpirun for tests/cluster/test_mpirun.py.
install_missing mpirun:openmpi-bin
# A real Prometheus, Pushgateway and node-exporter for tests/usage/test_prometheus.py (started
# on loopback by the tests themselves).
install_missing prometheus:prometheus prometheus-pushgateway:prometheus-pushgateway \
    prometheus-node-exporter:prometheus-node-exporter
bash scripts/ensure-docker.sh

venv() {  # venv DIR REQUIREMENTS [PYTHON]
    [ -x "$1/bin/python" ] || "${3:-$python}" -m venv "$1"
    # Said before pip starts: a cold install of a framework takes minutes with no output.
    say "$1: installing $2 (pip is quiet; a cold install takes minutes)"
    # No cache: a cold machine would keep a second copy of every wheel it downloads.
    "$1/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir -r "$2"
}
# A cold run needs about 20 GB: the environments (12), the images (8) and the tests' files.
say "$(df -Ph . | awk 'NR == 2 {print $4}') free on this disk; a cold run takes about 20 GB"
say "preparing .venv, .venv-nightly and the version matrix"
venv .venv requirements/test.txt
venv .venv-nightly requirements/nightly.txt
# The version matrix: an environment per older framework version, where what tfboot sets
# moved (tests/frameworks/test_jax_versions.py, test_tensorflow_versions.py).
for jax in 0.4.26 0.4.30 0.4.38 0.5.0; do venv ".venv-jax-$jax" "requirements/jax-$jax.txt"; done
for tf in 2.12 2.16-keras-3.0 2.17-tf-keras; do venv ".venv-tf-$tf" "requirements/tf-$tf.txt"; done

# find_python X.Y: the newest CPython X.Y pyenv holds (its root from `pyenv root`, else
# PYENV_ROOT or ~/.pyenv), else pythonX.Y on PATH; nothing when none of them runs.
find_python() {
    local root found
    root="$(pyenv root 2>/dev/null || true)"
    root="${root:-${PYENV_ROOT:-$HOME/.pyenv}}"
    found="$(ls -d "$root/versions/$1".*/bin/"python$1" 2>/dev/null | sort -V | tail -n 1 || true)"
    found="${found:-$(command -v "python$1" || true)}"
    if [ -n "$found" ] && "$found" -c '' 2>/dev/null; then printf '%s\n' "$found"; fi
}
# Python 3.10, as on Ubuntu 22.04 and older NGC images; 3.13, which the newest JAX needs
# (0.11 and later: Python 3.12 or later).
for pair in "3.10 .venv-tf-2.15-py3.10 requirements/tf-2.15-py3.10.txt" \
    "3.13 .venv-jax-0.12-py3.13 requirements/jax-0.12-py3.13.txt"; do
    read -r version env requirements <<<"$pair"
    interpreter="$(find_python "$version")"
    if [ -n "$interpreter" ]; then
        venv "$env" "$requirements" "$interpreter"
    else
        say "no Python $version here: its tests will say so (and fail under CI=true)"
    fi
done

# The environments share many wheels (numpy, scipy, jaxlib, Keras): each file once on disk.
.venv/bin/python scripts/link_duplicates.py .venv .venv-*

say "building and installing the tfboot wheel"
bash scripts/install-wheel.sh

.venv/bin/ruff check .
.venv/bin/ruff format --check bootstrap tests bench docker

# On a full run, build the container tests' images (one per Python, cached under content
# tags) in the background while the other tests run; the tests wait for them on a lock and
# report any build failure themselves.
prebuild=""
if [ "$#" -eq 0 ]; then
    mkdir -p .cache/docker
    say "building the test images in the background (log: .cache/docker/prebuild.log)"
    .venv/bin/python tests/docker/image_builds.py --all >.cache/docker/prebuild.log 2>&1 &
    prebuild=$!
    trap 'kill "$prebuild" 2>/dev/null || true' EXIT  # never outlive this script
fi
status=0
junit=()
if [ "$#" -eq 0 ]; then junit=(--junitxml=.cache/junit.xml); fi
.venv/bin/python -m pytest -n 2 --dist loadgroup -p no:cacheprovider -rs --durations=15 \
    "${junit[@]}" "$@" || status=$?
if [ -n "$prebuild" ] && [ "$status" -eq 0 ]; then wait "$prebuild" || true; fi
# A full run holds the README's stated costs against its own (the count fails a run).
if [ "$#" -eq 0 ] && [ "$status" -eq 0 ]; then
    .venv/bin/python scripts/stated_costs.py --junit .cache/junit.xml \
        --seconds "$((SECONDS - started))" --root . || status=$?
fi
exit "$status"
