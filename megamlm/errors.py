"""The one base class of errors a user can cause and fix.

Entry points (``pretrain.py``, ``tools/*.py``) print a ``UserError`` as one line and exit with code 2,
before any work starts and without touching anything on disk; every other exception is a bug.
"""


class UserError(Exception):
    """A bad flag, file, layout or checkpoint; the message names the problem and the fix."""


class ResumeError(UserError, ValueError):
    """A checkpoint whose history does not fit this launch; the message names both values and the flag to pass."""


class ConfigError(UserError, ValueError):
    """A bad flag, flag combination or input path; the message names the fix."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that is missing, incomplete, damaged, unsafe to read or does not fit this run; names the fix."""
