"""A wrapper of tfboot's out of the tracebacks that pass through it: an error raised by what
it wraps (the program's code, the framework's) shows the frames it shows without tfboot.

Every wrapper tfboot puts around a framework's function (the import hook, a DataLoader's,
tf.data's, the distributed start-up's) calls what it wraps under ``hidden``::

    with hidden:
        return original(*args, **kwargs)

An exception leaving that block loses the wrapper's own frame, and goes on with the
traceback it had below it. The ``with`` statement re-raises it as it is (Python 3.11 and
later, where an exception carries its traceback; before, the wrapper's one frame stays),
so the caller's frame is joined to the wrapped function's, as without tfboot. An error
tfboot raises itself, outside the block, keeps its frames. Only ``sys`` is imported: the
import hook uses it on the interpreter's start-up path.
"""

import sys


class _Hidden:
    """The context manager ``hidden``: stateless, one for every wrapper and thread."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: "object", error: "BaseException | None", tb: "object") -> None:
        # The traceback's first frame is the frame of the ``with`` (the wrapper's), which
        # the error entered on its way out of the wrapped call; any other first frame (an
        # interpreter that adds its own) is left as it is.
        if error is not None and tb is not None and tb.tb_frame is sys._getframe(1):
            error.__traceback__ = tb.tb_next


hidden = _Hidden()
