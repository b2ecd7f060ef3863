"""The memory allocator a command runs with: the system's TCMalloc where it has one, else
mimalloc from the ``cmeel-mimalloc`` wheel that requirements.txt installs (issues 31, 62).

glibc's allocator gives XLA's large step buffers back to the system and maps them again on
every training step: about half a million minor page faults per step at andrea12m and
andrea120m on a 2-core CPU, a second of kernel time, against PyTorch's tens of thousands.
TCMalloc keeps them: under two thousand faults per step. It cannot be switched on inside a
running process (the allocator is chosen when the process starts), so ``maybe_reexec``
starts the command again with ``LD_PRELOAD`` naming the library, once, before anything
heavy is imported; a training run then says so in one line (``note``, printed by
``train.run``), and a command that fails on its input prints nothing more than its error.
It changes no result, only where memory comes from.

- ``ANDREA_MALLOC=system`` keeps the system allocator (the opt-out);
- ``ANDREA_MALLOC=/path/to/libtcmalloc_minimal.so.4`` names the library;
- without a system TCMalloc (``apt-get install libtcmalloc-minimal4`` on Debian and Ubuntu)
  the wheel's ``libmimalloc.so`` is found through the package's installed files (``wheel``:
  no path to type); nothing happens when neither is installed, on a platform other than
  Linux, or when ``LD_PRELOAD`` already names an allocator (a caller's choice, or the
  re-executed command itself).

``experiments/__init__.py`` calls it for ``python -m experiments.<command>``.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
        "/usr/local/lib", "/opt/homebrew/lib")
ALLOCATORS = ("tcmalloc", "jemalloc", "mimalloc")
WHEEL = "cmeel-mimalloc"  # ships cmeel.prefix/lib/libmimalloc.so* (requirements.txt, Linux)


def wheel_library(distribution: str = WHEEL) -> str | None:
  """The ``libmimalloc.so`` that the ``distribution`` wheel installed, from its list of
  files (nothing is imported), or None where it is not installed."""
  try:
    found = importlib.metadata.distribution(distribution).files or ()
  except importlib.metadata.PackageNotFoundError:
    return None
  names = sorted((f for f in found if f.name.startswith("libmimalloc.so")), key=lambda f: len(
      f.name))  # libmimalloc.so, then its versioned names: any is the same library
  for f in names:
    path = str(f.locate())
    if os.path.exists(path):
      return os.path.realpath(path)
  return None


def find(env=os.environ, dirs=None, wheel=wheel_library) -> str | None:
  """The library to preload: a system TCMalloc (from ``dirs``, default ``DIRS``), else
  ``wheel()`` (the pip-installed mimalloc), or None (neither installed, or opted out)."""
  choice = env.get("ANDREA_MALLOC", "")
  if choice == "system":
    return None
  if choice:
    return choice if os.path.exists(choice) else None
  for d in DIRS if dirs is None else dirs:
    for name in NAMES:
      path = os.path.join(d, name)
      if os.path.exists(path):
        return path
  return wheel()


def name(library: str) -> str:
  """``"mimalloc"``, ``"tcmalloc"``, ... for a library's path (its file name otherwise)."""
  base = os.path.basename(library)
  return next((a for a in ALLOCATORS if a in base), base)


def command(orig_argv: list[str], library: str, env=os.environ) -> tuple[list[str], dict]:
  """The argv and environment that start the same command again with ``library`` preloaded."""
  preload = " ".join(filter(None, [library, env.get("LD_PRELOAD", "")]))
  return list(orig_argv), {**env, "LD_PRELOAD": preload}


def maybe_reexec(orig_argv: list[str] | None = None, env=os.environ, execve=os.execve,
                 platform: str = sys.platform) -> None:
  """Start this command again under ``find``'s allocator when there is one, not yet in use."""
  preloaded = env.get("LD_PRELOAD", "")
  if platform != "linux" or any(a in preloaded for a in ALLOCATORS):
    return
  choice = env.get("ANDREA_MALLOC", "")
  if choice and choice != "system" and not os.path.exists(choice):
    print(f"warning: ANDREA_MALLOC={choice!r}: no such file; running with the system allocator "
          f"(set it to a library's path, or to 'system')", file=sys.stderr, flush=True)
    return
  library = find(env)
  if library is None or library in preloaded:  # not installed, or this is the re-executed command
    return
  argv, new_env = command(orig_argv if orig_argv is not None else sys.orig_argv, library, env)
  new_env[IN_USE] = library
  execve(sys.executable, argv, new_env)


IN_USE = "ANDREA_MALLOC_IN_USE"  # set by the re-exec: the library it preloaded


def note(env=os.environ) -> str | None:
  """The line a run prints when it started again under the preloaded allocator, else None."""
  library = env.get(IN_USE)
  if not library or library not in env.get("LD_PRELOAD", ""):
    return None
  return (f"memory: {name(library)} preloaded ({library}; fewer page faults per step than "
          f"glibc's allocator); ANDREA_MALLOC=system keeps the system's")
