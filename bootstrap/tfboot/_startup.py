"""Start-up: register the import hooks of every framework in the ``FRAMEWORKS`` table.

``tfboot.pth`` (``tfboot.start`` on Python 3.15+) imports the ``tfboot`` package at
interpreter start, which puts a trampoline on ``sys.meta_path``; the first time a watched
framework (``tensorflow``, ``keras``, ``jax``, ``torch``) is imported, the trampoline calls
``activate``, which installs the real hooks and hands the import to them. Unless the kill
switch is on, it registers callbacks and returns: nothing is parsed and no framework is
imported here. It never raises: a failure here must not fail the user's import; it imports
only what ``site`` has already loaded.
"""

import os


def install(frameworks: "dict[str, tuple[str, str]]") -> bool:
    """Register the hooks of ``frameworks`` (the package's ``FRAMEWORKS`` table: module name
    -> its adapter and name) once (safe to call any number of times); True if they are
    active."""
    try:
        if os.environ.get("TFBOOT_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
            return False
        from . import _hook

        if "tensorflow" not in _hook.finder().hooks:
            for name, (adapter, _shown) in frameworks.items():
                _hook.when_imported(
                    name,
                    before=_hook_point(adapter, name, "before"),
                    after=_hook_point(adapter, name, "after"),
                )
        return True
    except BaseException as exc:
        if os.environ.get("TFBOOT_LOG", "").strip().lower() == "debug":
            # tfboot.values.line's format, written here: nothing more is imported on this path.
            os.write(2, f"tfboot: debug: import hook not installed: {exc!r}\n".encode())
        return False


def activate(name: str, frameworks: "dict[str, tuple[str, str]]") -> "object":
    """The trampoline's call: install the hooks in its place, then let them find ``name``."""
    _remove_trampoline()
    if not install(frameworks):
        return None
    from . import _hook

    try:
        return _hook.finder().find_spec(name)
    except Exception:  # the import then proceeds without tfboot's hook, never fails here
        return None


def _remove_trampoline() -> None:
    import sys

    sys.meta_path[:] = [f for f in sys.meta_path if f is not sys.modules.get("tfboot")]


def without_tensorflow_hook(frameworks: "dict[str, tuple[str, str]]") -> None:
    """The hooks, with none run for TensorFlow (``doctor`` applies it itself, catching errors).

    TensorFlow's import is still watched, so what it brings in is known to have come along.
    """
    _remove_trampoline()
    if install(frameworks):
        from . import _hook

        _hook.finder().hooks["tensorflow"] = (None, None)


def uninstall() -> None:
    """Remove tfboot's import hooks from this process (the undo of automatic start-up)."""
    import sys

    _remove_trampoline()
    if "tfboot._hook" in sys.modules:
        sys.modules["tfboot._hook"].remove_hooks()


def _hook_point(adapter: str, name: str, stage: str) -> "object":
    """The callback for ``stage`` of ``name``'s import: the executor runs its adapter there.
    A ``ConfigError`` fails the import as itself (``_hook.alone``)."""

    def hook(module: "object") -> None:
        from importlib import import_module

        from . import _hook
        from .errors import ConfigError
        from .executor import run

        configured = import_module(f"tfboot.adapters.{adapter}")
        try:
            result = run(configured, stage, module, name, _hook.importing())
        except ConfigError as exc:  # the import fails with the error alone, not tfboot's frames
            _hook.alone(exc)
            raise
        if result is not None:
            from .usage import watch

            watch(configured, name)

    return hook
