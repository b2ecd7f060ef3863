"""The project's files on disk: written so a kill cannot leave one half-written, and JSON
read back by one reader.

Every JSON file and cache file the project writes goes through ``atomic_write``: write to
a temporary file, then rename it, so a reader (or a resumed run) sees the old file or the
new one, never part of one. The temporary name carries the process id, so processes that
fill one cache at once do not collide. Every JSON file it reads goes through ``read_json``.
Every directory a command is told to write to (``--workdir``, ``--out``, ``data.cache_dir``)
is checked and made by ``make_directory``: a file in its way, or a reason the system gives,
is one line naming the flag, its value and the fix. ``check_paths`` is what an entry point
(``experiments.run``, ``prepare``, ``evaluate``) calls first, before it prints or compiles
anything: every directory and file it will write, and every directory it will read.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
from typing import Any

from andrea_jax import errors


def atomic_write(path: str | os.PathLike, *chunks: bytes) -> None:
  """Write ``chunks`` to ``path`` through a temporary file in the same directory."""
  tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
  try:
    with open(tmp, "wb") as f:
      for chunk in chunks:
        f.write(chunk)
    os.replace(tmp, path)
  except BaseException:  # a full disk, a kill: no temporary file is left behind
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def user_cache_dir() -> str:
  """Where the project caches what it measures or downloads for this user (a CPU's peak
  FLOP/s, HellaSwag): ``$XDG_CACHE_HOME/andrea_jax``, by default ``~/.cache/andrea_jax``."""
  root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "andrea_jax")


def write_json(path: str | os.PathLike, value: Any) -> None:
  """``value`` as indented JSON with sorted keys and a final newline, written atomically."""
  atomic_write(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def sha256(path: str | os.PathLike) -> str:
  """The sha256 of a file's bytes, as hex."""
  with open(path, "rb") as f:
    return hashlib.file_digest(f, "sha256").hexdigest()


def read_json(path: str | os.PathLike, fix: str = "restore it or delete it",
              error: type[errors.AndreaError] = errors.AndreaError) -> Any:
  """The JSON value in ``path``, or None if there is no such file.

  A file that is not valid JSON raises ``error`` with one line naming it and ``fix``.
  """
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise error(f"{os.fspath(path)} is not valid JSON ({e}); {fix}") from e


def check_directory(path: str, name: str, purpose: str,
                    error: type[errors.AndreaError] = errors.ConfigError) -> None:
  """Refuse ``name=path`` (a flag or config field) as a directory to write to when it is
  empty, or it or a directory above it is a file; nothing is created. ``purpose``
  completes "pass a directory ...": what the directory is for."""
  if not path:
    raise error(f"{name} is empty: pass a directory {purpose}")
  if os.path.exists(path) and not os.path.isdir(path):
    raise error(f"{name}={path!r} is a file: pass a directory {purpose}")
  blocker = next((p for p in pathlib.Path(path).absolute().parents
                  if p.exists() and not p.is_dir()), None)
  if blocker is not None:
    raise error(f"{name}={path!r}: {str(blocker)!r} is a file, not a directory: pass a "
                f"directory {purpose}")
  _check_writable(path, name, f"a directory you can write to {purpose}", error)


def _check_writable(path: str, name: str, fix: str, error: type[errors.AndreaError]) -> None:
  """Refuse ``path`` where it, or the nearest directory above it that exists, cannot be
  written (a read-only directory or file system, another user's directory)."""
  existing = os.path.abspath(path)
  while not os.path.exists(existing) and os.path.dirname(existing) != existing:
    existing = os.path.dirname(existing)
  mode = os.W_OK | (os.X_OK if os.path.isdir(existing) else 0)
  if not os.access(existing, mode):
    where = "it" if existing == os.path.abspath(path) else repr(existing)
    raise error(f"{name}={path!r}: {where} cannot be written (no permission, or a read-only "
                f"file system): pass {fix}")


def check_file(path: str, name: str, purpose: str,
               error: type[errors.AndreaError] = errors.ConfigError) -> None:
  """Refuse ``name=path`` as a file to write (``purpose``: what it is, e.g. "for the JSON")
  when it is a directory, a directory above it is a file, or it cannot be written."""
  if not path:
    raise error(f"{name} is empty: pass a file path {purpose}")
  if os.path.isdir(path):
    raise error(f"{name}={path!r} is a directory: pass a file path {purpose} (e.g. "
                f"{os.path.join(path, 'eval.json')})")
  blocker = next((p for p in pathlib.Path(path).absolute().parents
                  if p.exists() and not p.is_dir()), None)
  if blocker is not None:
    raise error(f"{name}={path!r}: {str(blocker)!r} is a file, not a directory: pass a file "
                f"path in a directory {purpose}")
  _check_writable(path, name, f"a file path you can write to {purpose}", error)


def check_paths(write_dirs: dict[str, tuple[str, str]] | None = None,
                write_files: dict[str, tuple[str, str]] | None = None,
                read_dirs: dict[str, tuple[str, str]] | None = None,
                read_files: dict[str, tuple[str, str]] | None = None,
                error: type[errors.AndreaError] = errors.ConfigError) -> None:
  """Check every path a command will use, before it prints or compiles anything: each maps
  a flag's name to ``(value, purpose)``; None values (a flag not given) are left out.
  ``write_dirs``: ``check_directory``; ``write_files``: ``check_file``; ``read_dirs``: an
  existing directory; ``read_files``: an existing file. The first that fails is one line
  naming the flag, its value and the fix."""
  for name, (path, purpose) in (write_dirs or {}).items():
    if path is not None:
      check_directory(path, name, purpose, error)
  for name, (path, purpose) in (write_files or {}).items():
    if path is not None:
      check_file(path, name, purpose, error)
  for name, (path, purpose) in (read_dirs or {}).items():
    if path is None:
      continue
    if not os.path.exists(path):
      raise error(f"{name}={path!r} does not exist: pass {purpose}")
    if not os.path.isdir(path):
      raise error(f"{name}={path!r} is a file: pass {purpose}")
  for name, (path, purpose) in (read_files or {}).items():
    if path is None:
      continue
    if not os.path.exists(path):
      raise error(f"{name}={path!r} does not exist: pass {purpose}")
    if os.path.isdir(path):
      raise error(f"{name}={path!r} is a directory: pass {purpose}")


def make_directory(path: str, name: str, purpose: str,
                   error: type[errors.AndreaError] = errors.ConfigError) -> None:
  """``check_directory``, then create ``path`` and its parents (an existing one is kept);
  what the system refuses (a permission, a read-only or full disk) is one line too."""
  check_directory(path, name, purpose, error)
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise error(f"{name}={path!r}: cannot create it ({e.strerror}): pass a directory you can "
                f"write to {purpose}") from None
