"""Start-up: register the TensorFlow, Keras, JAX and PyTorch import hooks.

``tfboot.pth`` (``tfboot.start`` on Python 3.15+) imports the ``tfboot`` package at
interpreter start, which puts a trampoline on ``sys.meta_path``; the first time a watched
framework (``tensorflow``, ``keras``, ``jax``, ``torch``) is imported, the trampoline calls
``activate``, which installs the real hooks and hands the import to them. Unless the kill
switch is on, it registers callbacks and returns: nothing is parsed and no framework is
imported here. It never raises: a failure here must not fail the user's import; it imports
only what ``site`` has already loaded.
"""

import os


def install() -> bool:
    """Register the hooks once (safe to call any number of times); True if they are active."""
    try:
        if os.environ.get("TFBOOT_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
            return False
        from . import _hook

        if "tensorflow" not in _hook.finder().hooks:
            _hook.when_imported("tensorflow", before=_validate, after=_configure)
            for name in ("keras", "tf_keras"):
                _hook.when_imported(name, after=_configure_keras)
            for name in ("jax", "torch"):
                _hook.when_imported(
                    name, before=_framework("before", name), after=_framework("after", name)
                )
        return True
    except BaseException as exc:
        if os.environ.get("TFBOOT_LOG", "").strip().lower() == "debug":
            # tfboot.values.line's format, written here: nothing more is imported on this path.
            os.write(2, f"tfboot: debug: import hook not installed: {exc!r}\n".encode())
        return False


def activate(name: str) -> "object":
    """The trampoline's call: install the hooks in its place, then let them find ``name``."""
    _remove_trampoline()
    if not install():
        return None
    from . import _hook

    try:
        return _hook.finder().find_spec(name)
    except Exception:  # the import then proceeds without tfboot's hook, never fails here
        return None


def _remove_trampoline() -> None:
    import sys

    sys.meta_path[:] = [f for f in sys.meta_path if f is not sys.modules.get("tfboot")]


def without_tensorflow_hook() -> None:
    """The hooks, with none run for TensorFlow (``doctor`` applies it itself, catching errors).

    TensorFlow's import is still watched, so what it brings in is known to have come along.
    """
    _remove_trampoline()
    if install():
        from . import _hook

        _hook.finder().hooks["tensorflow"] = (None, None)


def uninstall() -> None:
    """Remove tfboot's import hooks from this process (the undo of automatic start-up)."""
    import sys

    _remove_trampoline()
    if "tfboot._hook" in sys.modules:
        sys.modules["tfboot._hook"].remove_hooks()


def _validate(_module: "object") -> None:
    from .apply import validate

    validate()


def _configure(module: "object") -> None:
    from .apply import apply

    apply(module)


def _framework(when: str, name: str) -> "object":
    """The hook for JAX or PyTorch: ``frameworks.apply``'s ``before_<name>``/``after_<name>``."""

    def hook(module: "object") -> None:
        from .frameworks import apply

        getattr(apply, f"{when}_{name}")(module)

    return hook


def _configure_keras(module: "object") -> None:
    from .apply import apply_keras

    apply_keras(module)
