"""The one base class of errors a user can cause and fix.

Entry points (``pretrain.py``, ``tools/*.py``) print a ``UserError`` as one line and exit with code 2,
before any work starts and without touching anything on disk; every other exception is a bug.
"""

import errno
import os
import sys


class UserError(Exception):
    """A bad flag, file, layout or checkpoint; the message names the problem and the fix."""


class ResumeError(UserError, ValueError):
    """A checkpoint whose history does not fit this launch; the message names both values and the flag to pass."""


class ConfigError(UserError, ValueError):
    """A bad flag, flag combination or input path; the message names the fix."""


class LayoutError(UserError, ValueError):
    """An impossible parallel layout; the message names the fix."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that is missing, incomplete, damaged, unsafe to read or does not fit this run; names the fix."""


FIXABLE_ERRNOS = frozenset(getattr(errno, name) for name in (
    "EACCES", "EPERM", "ENOSPC", "EDQUOT", "EFBIG", "EROFS", "ENOTDIR", "EISDIR", "ENOENT", "EEXIST", "ENOTEMPTY",
    "ENAMETOOLONG", "ELOOP") if hasattr(errno, name))
"""I/O failures a user fixes (space, permissions, a path that is a file or missing), not bugs."""


def os_error_text(err: OSError) -> str:
    """'No space left on device (ENOSPC): runs/x/metrics.jsonl': the cause, its errno name and the path."""
    name = errno.errorcode.get(err.errno, str(err.errno)) if err.errno else type(err).__name__
    cause = os.strerror(err.errno) if err.errno else str(err)
    paths = [p for p in (err.filename, getattr(err, "filename2", None)) if p]
    text = f"{cause} ({name})" + (f": {' -> '.join(map(str, paths))}" if paths else "")
    if err.errno == errno.EEXIST and paths and os.path.exists(paths[0]) and not os.path.isdir(paths[0]):
        text += " is a file where a folder is needed"  # os.makedirs through a file
    return text


def fixable_io(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in FIXABLE_ERRNOS


def exit_line(error: BaseException) -> int:
    """The one way entry points end on a user's problem: a UserError, or an I/O error a user can fix (with its
    path and errno name), printed as one line on stderr; returns the exit code 2. Anything else is re-raised (a
    bug, with its traceback)."""
    if isinstance(error, UserError):
        print(f"error: {error}", file=sys.stderr)
        return 2
    if fixable_io(error):
        print(f"error: {os_error_text(error)}", file=sys.stderr)
        return 2
    raise error
