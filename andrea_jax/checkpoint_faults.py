"""Why a checkpoint did not save or restore, told apart and named: what is the files' fault.

A restore compares the checkpoint's tree with the run's first (``tree_differences``: a
checkpoint of another state, its entries named); what a read raises after that is damage to
the files (``damaged``: a ``DamagedError`` naming the files missing, empty, cut short or not
valid JSON, and what the read said), unless memory ran out (``out_of_memory``: not the
files' fault). A save that fails on a full disk is told by ``disk_full``. ``checkpoint.py``
acts on these: it falls back past damaged steps and cleans up after a full disk.
"""

from __future__ import annotations

import errno
import json
import os
import re
from typing import Any

import jax

from andrea_jax import errors

# The metadata files of a step that are JSON, relative to its directory (orbax's layout).
_JSON_FILES = ("_CHECKPOINT_METADATA", "default/_METADATA", "default/_sharding",
               "default/array_metadatas/process_0")
# Files without which a step does not read (the tree's metadata, the OCDBT root).
_REQUIRED_FILES = ("default/_METADATA", "default/manifest.ocdbt")


class DamagedError(errors.CheckpointError):
  """A finished checkpoint whose files do not read: ``step``, ``files`` (names relative to
  its directory) and ``reason`` (what the read said)."""

  def __init__(self, directory: str, step: int, files: list[str], reason: str):
    self.directory, self.step, self.files, self.reason = directory, step, files, reason
    super().__init__(f"checkpoint step {step} in {directory} is damaged ({self.what()})")

  def what(self) -> str:
    return f"{', '.join(self.files)}: {self.reason}" if self.files else self.reason


def disk_full(error: BaseException) -> bool:
  """Whether ``error`` (or what it wraps) is a full disk: ENOSPC, or tensorstore's
  ``RESOURCE_EXHAUSTED`` / "No space left on device"."""
  for e in _chain(error):
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
      return True
    if re.search(r"RESOURCE_EXHAUSTED|No space left on device|Disk quota exceeded", str(e)):
      return True
  return False


def out_of_memory(error: Exception) -> bool:
  """Memory (host or device) ran out somewhere in ``error``'s chain: during a read, not the
  files' fault, so not taken for damage; in training, ``train.out_of_memory_advice``'s."""
  return any(isinstance(e, MemoryError) or "out of memory" in str(e).lower()
             for e in _chain(error))


def damaged(directory: str, step: int, error: BaseException) -> DamagedError:
  """The ``DamagedError`` for a read of ``step`` that raised ``error``: the files it names,
  the step's metadata files that are missing, empty or not valid JSON, and empty files.

  Anything a read raises counts as damage: the names and shapes were compared before
  (``tree_differences``), so what is left is the files. (A bug would show up as every
  step damaged, with its message.)
  """
  step_dir = os.path.join(directory, str(step))
  found: dict[str, str] = {}
  for e in _chain(error):
    for path in re.findall(r'local file "([^"]+)"', str(e)):
      rel = os.path.relpath(path, step_dir)
      if not rel.startswith("..") and not os.path.isdir(path):
        found.setdefault(rel, _file_state(path))
  for rel in _JSON_FILES + _REQUIRED_FILES:
    state = _file_state(os.path.join(step_dir, rel), json_file=rel in _JSON_FILES)
    if state and (rel in _REQUIRED_FILES or state != "missing"):
      found[rel] = state
  for root, _, names in os.walk(step_dir):
    for name in names:
      if os.path.getsize(os.path.join(root, name)) == 0:
        found[os.path.relpath(os.path.join(root, name), step_dir)] = "empty"
  files = [f"{rel} {state}" if state else rel for rel, state in sorted(found.items())]
  if len(files) > 3:
    files = files[:3] + [f"and {len(files) - 3} more"]
  return DamagedError(directory, step, files, _reason(error))


def _file_state(path: str, json_file: bool = False) -> str:
  """``"missing"``, ``"empty"``, ``"not valid JSON"`` or ``""`` (present, nothing seen)."""
  if not os.path.exists(path):
    return "missing"
  if os.path.getsize(path) == 0:
    return "empty"
  if json_file:
    try:
      with open(path, encoding="utf-8") as f:
        json.load(f)
    except (ValueError, UnicodeDecodeError):
      return "not valid JSON"
  return ""


def _chain(error: BaseException):
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    yield error
    error = error.__cause__ or error.__context__


def _reason(error: BaseException) -> str:
  """What the read said, on one line: tensorstore's code and last clause (naming the array
  it could not read), else the outermost message; without tensorstore's spec."""
  for e in _chain(error):
    m = re.match(r"([A-Z_]+): (.*)", _without_spec(str(e)), re.S)
    if m:  # tensorstore: CODE: Error ... at local file "...": what went wrong
      array = re.search(r'Error reading "([^"/]+)/\d', m[2])
      last = re.split(r'"\s*:\s*', m[2])[-1]
      text = (f"the data of {array[1].replace('.', '/')} does not read, " if array else "") + (
          f"{m[1]}: {last}")
      break
  else:
    text = _without_spec(str(error)) or type(error).__name__
  text = " ".join(text.split())
  return text if len(text) <= 160 else text[:157] + "..."


def _without_spec(text: str) -> str:
  return re.split(r"\s*\[tensorstore_spec|\s*See full TensorStore details", text)[0]


# ----------------------------------------------------------------------------- comparing trees


def _name(path) -> str:
  """``opt_state/0/mu/wte`` for a key path; namedtuple fields and dict keys read alike."""
  parts = []
  for k in path:
    parts.append(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))))
  return "/".join(parts)


def _leaves(tree) -> dict[str, tuple]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {_name(path): tuple(getattr(leaf, "shape", ())) for path, leaf in leaves}


def tree_differences(saved: Any, target: Any, partial: bool = False, limit: int = 4) -> list[str]:
  """What separates a checkpoint's tree (its metadata) from the tree a run wants to restore."""
  old, new = _leaves(saved), _leaves(target)
  order = lambda names: sorted(names, key=lambda n: (not n.startswith("params/"), n))
  shown = lambda names: ", ".join(order(names)[:limit]) + (
      f" (and {len(names) - limit} more)" if len(names) > limit else "")
  out = []
  if not partial and (extra := set(old) - set(new)):
    out.append(f"only in the checkpoint: {shown(extra)}")
  if missing := set(new) - set(old):
    out.append(f"missing from the checkpoint: {shown(missing)}")
  reshaped = [f"{n} {old[n]} in the checkpoint vs {new[n]} here"
              for n in order(set(old) & set(new)) if old[n] != new[n]]
  if reshaped:
    out.append("different shapes: " + "; ".join(reshaped[:limit]))
  return out
