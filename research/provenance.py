"""Where a result came from: the commit that produced it and whether the tree was clean."""

from __future__ import annotations

import collections
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args: str, root: str = ROOT) -> str:
  """The output of ``git args`` in ``root``; OSError or SubprocessError where git fails."""
  return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True,
                        timeout=20).stdout


def code_version(root: str = ROOT) -> dict:
  """``{"commit", "clean"}``: HEAD and whether ``git status --porcelain`` is empty; None where git fails."""
  try:
    return {"commit": git("rev-parse", "HEAD", root=root).strip(),
            "clean": not git("status", "--porcelain", root=root).strip()}
  except (OSError, subprocess.SubprocessError):
    return {"commit": None, "clean": None}


def in_history(commit: str) -> bool:
  try:
    git("cat-file", "-e", f"{commit}^{{commit}}")
    return True
  except (OSError, subprocess.SubprocessError):
    return False


def code_lines(cells: list[dict]) -> list[str]:
  """The report section on which commits trained the cells."""
  seen = collections.Counter()
  for c in cells:
    code = c.get("code") or {}
    seen[(code.get("commit"), code.get("clean"), bool(c.get("code_earlier")))] += 1
  out = ["## The code that trained the cells", ""]
  for (commit, clean, resumed), n in seen.most_common():
    if commit is None:
      out.append(f"- {n} cells: **no commit recorded**.")
      continue
    out.append(f"- {n} cells: commit `{commit}`, "
               + ("clean tree" if clean else "**uncommitted changes at run time**")
               + ("" if in_history(commit) else ", **not in this repository's history**")
               + ("; resumed by other code (see code_earlier)" if resumed else "") + ".")
  return out + [""]
