"""Where a result came from: the commit that produced it and whether the tree was clean.

Every cell of a study (``research/runner.py``) and every benchmark record carries it, so a
figure is always traceable to the code that made it.
"""

from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_version(root: str = ROOT) -> dict:
  """The code that trains: the commit checked out (``git rev-parse HEAD``) and whether the
  tree was clean (``git status --porcelain`` empty: no tracked change, no untracked file
  that is not ignored); ``None`` for each where git cannot tell."""
  run = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True,
                                  check=True, timeout=20).stdout
  try:
    return {"commit": run("rev-parse", "HEAD").strip(), "clean": not run("status", "--porcelain").strip()}
  except (OSError, subprocess.SubprocessError):
    return {"commit": None, "clean": None}
