"""Post-import hooks: run callbacks around a module's first import, however it is imported.

A finder on ``sys.meta_path`` notices the watched names, lets the other finders find the
real module, and wraps its loader so ``before`` runs just before the module's code and
``after`` right after it. Covers ``import x``, ``importlib.import_module``, imports of a
submodule (the package comes first), imports from threads, and spawned children (which
run ``site`` again).

It is loaded by the start-up trampoline (``tfboot/__init__.py``) at the first import of
TensorFlow or Keras, and keeps to modules ``site`` has already loaded (``sys``,
``_thread``).
"""

import _thread
import sys

# Callback: a callable taking the module object, returning None.

# Per thread: the watched modules whose code is running now, outermost first (a framework
# imported while another is importing came along with it).
_state = _thread._local()


def importing() -> tuple[str, ...]:
    """The watched modules being imported in this thread, outermost first."""
    return tuple(getattr(_state, "stack", ()))


class _HookLoader:
    """Delegates to the real loader, running the callbacks around ``exec_module``."""

    def __init__(self, loader: "object", before: "object", after: "object") -> None:
        self._loader = loader
        self._before = before
        self._after = after

    def __getattr__(self, name: str) -> "object":
        return getattr(self._loader, name)

    def create_module(self, spec: "object") -> "object":
        return self._loader.create_module(spec)

    def exec_module(self, module: "object") -> None:
        # Give the module its real loader back, so nothing downstream sees the wrapper.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        stack.append(module.__name__)
        try:
            if self._before is not None:
                self._before(module)
            self._loader.exec_module(module)
        finally:
            stack.pop()
        if self._after is not None:
            self._after(sys.modules.get(module.__name__, module))


class ImportHookFinder:
    """The ``sys.meta_path`` entry; at most one is installed per interpreter."""

    def __init__(self) -> None:
        self.hooks: dict[str, tuple[object, object]] = {}
        self._busy = _thread._local()

    def find_spec(self, fullname: str, path: "object" = None, target: "object" = None) -> "object":
        hook = self.hooks.get(fullname)
        if hook is None or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            from importlib.util import find_spec

            spec = find_spec(fullname)
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookLoader(spec.loader, *hook)
        return spec


def finder() -> ImportHookFinder:
    """The installed finder, installing it first if needed (idempotent)."""
    for entry in sys.meta_path:
        if isinstance(entry, ImportHookFinder):
            return entry
    installed = ImportHookFinder()
    sys.meta_path.insert(0, installed)
    return installed


def when_imported(name: str, before: "object" = None, after: "object" = None) -> None:
    """Run ``before``/``after`` around ``name``'s first import; ``after`` at once if loaded."""
    finder().hooks[name] = (before, after)
    module = sys.modules.get(name)
    if module is not None and after is not None:
        after(module)


def remove_hooks() -> None:
    """Uninstall the finder and every hook (the undo of ``when_imported``)."""
    sys.meta_path[:] = [e for e in sys.meta_path if not isinstance(e, ImportHookFinder)]
