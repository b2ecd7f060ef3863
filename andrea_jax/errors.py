"""The project's own error types, and the exit codes of every command-line entry point.

Every error that a user can fix (a bad config, bad data, a missing or mismatched
checkpoint, a model that cannot be converted) derives from ``AndreaError``. The entry
points (``python -m experiments.run``, ``prepare``, ``sample``, ...) turn an
``AndreaError`` into one ``error: ...`` line on stderr and exit with ``EXIT_USER_ERROR``;
anything else is a bug and keeps its traceback. ``AndreaError`` subclasses ``ValueError``
so code that catches ``ValueError`` keeps working.
"""

from __future__ import annotations

# Exit codes shared by the entry points (README, "Exit codes").
EXIT_COMPLETED = 0
EXIT_USER_ERROR = 2  # bad config, data or checkpoint: the message says what to fix
EXIT_DIVERGED = 3  # non-finite loss or gradient; the last good checkpoint is kept
EXIT_INTERRUPTED = 4  # SIGTERM/SIGINT; a checkpoint was saved, rerun the command to resume


class AndreaError(ValueError):
  """An error the user can fix; the message names the bad value and the fix."""


class ConfigError(AndreaError):
  """A config value (or override, or variant) that is not allowed."""


class DataError(AndreaError):
  """Input data that cannot be used; the message names the file and the fix."""


class DataNotFoundError(DataError, FileNotFoundError):
  """A data path that does not exist."""


class CheckpointError(AndreaError):
  """A checkpoint or run directory that is missing, corrupt, or does not match the config."""


class InputError(AndreaError):
  """Model input that the model cannot take: token ids out of range, a sequence or prompt
  longer than the context, a bad sampling setting."""
