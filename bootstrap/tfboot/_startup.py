"""Interpreter start-up (the target of ``tfboot.pth``): register the TensorFlow import hook.

Runs in every Python process of the environment, so it does almost nothing: unless the
kill switch is on, it registers callbacks for ``tensorflow`` and ``keras`` and returns.
Nothing is parsed and TensorFlow is not imported here. It never raises: an exception that
escapes ``site`` prints noise at every start, and a ``BaseException`` aborts the interpreter.
It imports only what ``site`` has already loaded (annotations are strings for that reason).
"""

import os


def install() -> None:
    """Register the hooks once; safe to call any number of times."""
    try:
        if os.environ.get("TFBOOT_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
            return
        from . import _hook

        if "tensorflow" in _hook.finder().hooks:
            return
        _hook.when_imported("tensorflow", before=_validate, after=_configure)
        for name in ("keras", "tf_keras"):
            _hook.when_imported(name, after=_configure_keras)
    except BaseException as exc:
        if os.environ.get("TFBOOT_LOG", "").strip().lower() == "debug":
            os.write(2, f"tfboot: debug: import hook not installed: {exc!r}\n".encode())


def _validate(_module: "object") -> None:
    from .apply import validate

    validate()


def _configure(module: "object") -> None:
    from .apply import apply

    apply(module)


def _configure_keras(module: "object") -> None:
    from .apply import apply_keras

    apply_keras(module)


install()
