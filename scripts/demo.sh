#!/usr/bin/env bash
# Demo: make a fresh environment with TensorFlow's CPU wheel and tfboot, then show tfboot
# applying VIRTUAL_SPLIT=2 on a machine with no GPU (CPU:0 becomes two logical CPUs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"
demo=.venv-demo

say() { printf 'demo: %s\n' "$*" >&2; }

if [ ! -x "$demo/bin/python" ]; then
    say "making a fresh environment in $demo"
    "$python" -m venv "$demo"
fi
if ! "$demo/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('tensorflow') is None)"; then
    say "installing tensorflow-cpu 2.21.0 into $demo (about 600 MB; a few minutes the first time)"
fi
"$demo/bin/python" -m pip install -q --disable-pip-version-check "tensorflow-cpu==2.21.0"
say "building the tfboot wheel and installing it"
rm -rf dist && "$demo/bin/python" -m pip wheel -q --no-deps -w dist .
"$demo/bin/python" -m pip install -q --force-reinstall dist/tfboot-*.whl
export TF_CPP_MIN_LOG_LEVEL=2

echo "\$ VIRTUAL_SPLIT=2 python -m tfboot doctor"
VIRTUAL_SPLIT=2 "$demo/bin/python" -m tfboot doctor
echo
# Its stderr as a user sees it: what tfboot configured, then, at the end, the used: line
# (each budget's figure over the process's life, and what to set next time).
echo "\$ VIRTUAL_SPLIT=2 python -c 'import tensorflow as tf; print(tf.config.list_logical_devices(\"CPU\"))'"
VIRTUAL_SPLIT=2 "$demo/bin/python" -c 'import tensorflow as tf; print(tf.config.list_logical_devices("CPU"))' 2>&1
echo
# Fails closed, naming the variable: the error alone, after the importer's own line.
echo "\$ MEMORY_LIMIT_MB=abc python -c 'import tensorflow'"
MEMORY_LIMIT_MB=abc "$demo/bin/python" -c 'import tensorflow' 2>&1 || echo "(exit status $?)"
