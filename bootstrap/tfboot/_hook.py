"""Post-import hooks: run callbacks around a module's first import, however it is imported.

A finder on ``sys.meta_path`` notices the watched names, lets the other finders find the
real module, and wraps its loader so ``before`` runs just before the module's code and
``after`` right after it. Covers ``import x``, ``importlib.import_module``, imports of a
submodule (the package comes first), imports from threads, and spawned children (which
run ``site`` again).

It is loaded by the start-up trampoline (``tfboot/__init__.py``) at the first import of
TensorFlow or Keras, and keeps to modules ``site`` has already loaded (``sys``,
``_thread``, ``_frozen_importlib``) and ``tfboot.frames``, which imports only ``sys``.

An error at import is the error (``alone``): a callback's exception marked so reaches the
importer with its traceback cut at the hook, and, left uncaught, is shown with the
importer's own frames only. The loader runs through importlib's
``_call_with_frames_removed``, the mark by which CPython drops importlib's frames from a
traceback (``remove_importlib_frames`` in ``Python/import.c``), and the hook's frame holds
``__tracebackhide__``, which pytest and IPython hide. An error of the module's own code
leaves the hook's frame out of its traceback, so it looks as it does without tfboot (bug
reports about a framework's import never name tfboot: ``frames.hidden``). Every other
exception keeps its frames.
"""

import _thread
import sys

from .frames import hidden

# Callback: a callable taking the module object, returning None.

# Per thread: the watched modules whose code is running now, outermost first (a framework
# imported while another is importing came along with it).
_state = _thread._local()
# The attribute that marks an exception to be shown alone (``alone``).
ALONE = "_tfboot_alone"
# importlib's function whose frame, with the importlib frames above it, CPython drops from
# a traceback; None where this interpreter has none (the loader is then called plainly).
_frames_removed = getattr(sys.modules.get("_frozen_importlib"), "_call_with_frames_removed", None)


def importing() -> tuple[str, ...]:
    """The watched modules being imported in this thread, outermost first."""
    return tuple(getattr(_state, "stack", ()))


class _HookLoader:
    """Delegates to the real loader, running the callbacks around ``exec_module``."""

    def __init__(self, loader: "object", before: "object", after: "object") -> None:
        self._loader = loader
        self._before = before
        self._after = after
        if _frames_removed is not None:
            # importlib's ``_load_unlocked`` calls ``exec_module``: a bound method of
            # ``_call_with_frames_removed`` (C calling C, no frame of its own), so CPython drops
            # importlib's frames of this import as it does for any module's code.
            self.exec_module = type(self.create_module)(_frames_removed, self._exec)

    def __getattr__(self, name: str) -> "object":
        return getattr(self._loader, name)

    def create_module(self, spec: "object") -> "object":
        return self._loader.create_module(spec)

    def exec_module(self, module: "object") -> None:
        self._exec(module)

    def _exec(self, module: "object") -> None:
        __tracebackhide__ = True  # pytest's and IPython's mark: a frame the reader need not see
        # Give the module its real loader back, so nothing downstream sees the wrapper.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        stack = getattr(_state, "stack", None)
        if stack is None:
            stack = _state.stack = []
        stack.append(module.__name__)
        try:
            try:
                if self._before is not None:
                    self._before(module)
                with hidden:  # the module's own error, as without tfboot
                    self._loader.exec_module(module)
            finally:
                stack.pop()
            if self._after is not None:
                self._after(sys.modules.get(module.__name__, module))
        except BaseException as exc:
            if getattr(exc, ALONE, False) is not True:
                raise
            # The error alone: none of the frames below the importer's (tfboot's, the
            # framework's own while it imported another watched module) says more than it.
            raise exc.with_traceback(None) from None


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


def alone(exc: BaseException) -> BaseException:
    """Mark ``exc``, about to be raised by a callback, to reach the importer as the error
    alone: its traceback is cut at the hook (it stays an exception the program can catch),
    and, if nothing catches it, ``sys.excepthook`` (``threading.excepthook`` in a thread) is
    handed it with the importer's frames only, through a hook chained before the one in
    place (installed here, once)."""
    setattr(exc, ALONE, True)
    if not isinstance(sys.excepthook, _Excepthook):
        sys.excepthook = _Excepthook(sys.excepthook)
    threading = sys.modules.get("threading")  # loaded wherever a thread imports
    if threading is not None and not isinstance(threading.excepthook, _Excepthook):
        threading.excepthook = _Excepthook(threading.excepthook, in_thread=True)
    return exc


class _Excepthook:
    """An exception hook for an uncaught error marked ``alone``: the hook before it is handed
    the error with the frames from the import hook's on cut away, and with them the
    importlib frames that led there; every other exception goes to it as it came."""

    def __init__(self, previous: "object", in_thread: bool = False) -> None:
        self.previous = previous
        self.in_thread = in_thread

    def __call__(self, *args: "object") -> "object":
        kind, value, tb = args[0][:3] if self.in_thread else args
        if getattr(value, ALONE, False) is True:
            tb = _importer_frames(tb)
            value.__traceback__ = tb  # the default hooks print the exception's own
            args = (type(args[0])((kind, value, tb, *args[0][3:])),) if self.in_thread else \
                (kind, value, tb)  # fmt: skip
        return self.previous(*args)


def _importer_frames(tb: "object") -> "object":
    """The traceback ``tb`` up to the import hook's frame, without the importlib frames just
    before it (an ``importlib.import_module`` call's); None when no frame is left."""
    hooks = (_HookLoader.exec_module.__code__, _HookLoader._exec.__code__)
    entries = []
    while tb is not None and tb.tb_frame.f_code not in hooks:
        entries.append(tb)
        tb = tb.tb_next
    while entries and entries[-1].tb_frame.f_code.co_filename.startswith("<frozen importlib."):
        entries.pop()
    if not entries:
        return None
    entries[-1].tb_next = None
    return entries[0]
