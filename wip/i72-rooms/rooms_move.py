#!/usr/bin/env python3
"""Issue 72, "the library in rooms by job": move andrea_jax's modules into rooms and rewrite
every reference to their old places.

Usage, from the root of a checkout:

  python /work/rooms_move.py --move            # git mv the modules into their rooms (once)
  python /work/rooms_move.py FILE...           # rewrite references in these files, in place
  python /work/rooms_move.py --check FILE...   # list the files that would change; exit 1 if any
  python /work/rooms_move.py --all             # rewrite every tracked file but wip/ (git ls-files)

The rewrite is idempotent (a file already rewritten is left as it is; ``--check`` on a
rewritten tree lists nothing) and reads nothing but the files it is given. To carry the move
onto another branch (main once i72-config is in it, or a helper's branch), regenerate it there
rather than merging i72-rooms' rename commit:

  python /work/rooms_move.py --move && python /work/rooms_move.py --all
  git add -A && git commit -m "The library in rooms by job: the move, by rooms_move.py"
  git cherry-pick <i72-rooms' commits after the move>   # __init__s, TYPE_CHECKING, the test

and on a branch that already has the rooms but still names old paths (merged from before
them): ``python /work/rooms_move.py --all`` (or just the files it changed:
``git diff --name-only main...HEAD | xargs python /work/rooms_move.py``). A module a branch
adds directly in andrea_jax/ is placed by adding it to ROOMS below and rerunning both steps
(tests/test_imports.py's BASE otherwise fails on it).

What it rewrites, in any text file (code, docs, notebooks' cell sources, tests):

- ``from andrea_jax import a, b as c``: each name that moved is imported from its room; the
  names are grouped by package, one statement per package (a statement that starts a line
  becomes several lines at its indentation; one inside a line, ``python -c "..."``, is joined
  with ``; ``);
- ``andrea_jax.X`` as a dotted name anywhere (``from andrea_jax.X import``, ``import
  andrea_jax.X``, ``mock.patch("andrea_jax.X.f")``, ``python -m andrea_jax.X``);
- ``andrea_jax/X.py`` (also ``andrea_jax/X\\.py`` in a regex) as a path in docs, comments and
  code.

In ``.py`` files and notebooks' code cells a run of consecutive ``andrea_jax`` import lines
(at one indentation) that the rewrite changed is sorted again by module, then names, the
order the project keeps (Google style: one module per statement, sorted). ``.ipynb`` files
are read as JSON; only the cells' ``source`` is rewritten, and the file is written back in
nbformat's layout (indent 1, non-ASCII kept), byte for byte as before elsewhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

# The rooms: old module (a file directly in andrea_jax/) -> its room. A module not named here
# stays in andrea_jax/ itself: the base every room may import (errors, files, fields,
# allocator, progress, signals, sharding), and the packages interop/ and tools/.
ROOMS = {
    "data": ["builtin_corpus", "corpus", "encode", "file_formats", "loader", "prepare",
             "prepared", "readers", "shards", "split", "tokenizer", "tokenizer_sample"],
    "nn": ["attention", "branches", "cross_entropy", "init", "model", "model_config", "mup",
           "norms", "precision", "recipes", "sample"],
    "training": ["checkpoint", "checkpoint_faults", "config", "configdict", "cooldown",
                 "diagnostics", "forecast", "logger", "loop", "members", "memory", "metrics",
                 "multi", "plots", "profiler", "resume", "run_record", "schedule", "scoring",
                 "step", "tasks", "train", "validation", "workdir"],
}
ROOM_OF = {module: room for room, modules in ROOMS.items() for module in modules}
assert len(ROOM_OF) == sum(map(len, ROOMS.values())), "a module is in two rooms"
assert not set(ROOMS) & set(ROOM_OF), "a room is named as a module: the rewrite would not be idempotent"

_NAMES = "|".join(sorted(ROOM_OF, key=len, reverse=True))
# andrea_jax.X as a dotted name (not andrea_jax.X_more, not something.andrea_jax.X).
DOTTED = re.compile(rf"(?<![\w.])andrea_jax\.({_NAMES})(?!\w)")
# andrea_jax/X.py (or andrea_jax/X\.py in a regex) as a path.
PATH = re.compile(rf"(?<![\w.-])andrea_jax/({_NAMES})(?=\\?\.py(?!\w))")
# from andrea_jax import a, b as c (one line; a parenthesised list may span lines).
_NAME = r"[A-Za-z_]\w*(?:\s+as\s+[A-Za-z_]\w*)?"
FROM_IMPORT = re.compile(
    rf"from andrea_jax import (?:\((?P<paren>[^)]*)\)|(?P<names>{_NAME}(?:[ \t]*,[ \t]*{_NAME})*))")
IMPORT_LINE = re.compile(r"^(?P<indent>[ \t]*)(?:from (?P<from>andrea_jax[\w.]*) import |"
                         r"import (?P<import>andrea_jax[\w.]*))")


def new_module(old: str) -> str:
  """``andrea_jax.X`` -> ``andrea_jax.ROOM.X`` for a module that moved (X a name of ROOM_OF)."""
  return f"andrea_jax.{ROOM_OF[old]}.{old}"


def _split_names(text: str) -> list[str]:
  """The ``name`` / ``name as alias`` items of an import list (comments and newlines dropped)."""
  text = re.sub(r"#[^\n]*", "", text)
  return [" ".join(item.split()) for item in text.replace("\n", " ").split(",") if item.strip()]


def _rewrite_from_import(match: re.Match, source: str) -> str:
  """The statement(s) ``from andrea_jax import ...`` becomes: names grouped by package."""
  names = _split_names(match.group("paren") if match.group("paren") is not None
                       else match.group("names"))
  groups: dict[str, list[str]] = {}
  for item in names:
    name = item.split()[0]
    package = f"andrea_jax.{ROOM_OF[name]}" if name in ROOM_OF else "andrea_jax"
    groups.setdefault(package, []).append(item)
  if list(groups) == ["andrea_jax"]:
    return match.group(0)  # nothing moved: left exactly as it was
  statements = [f"from {package} import {', '.join(items)}" for package, items in groups.items()]
  line_start = source.rfind("\n", 0, match.start()) + 1
  before = source[line_start:match.start()]
  if before.strip():  # inside a line (a string, a sentence): one line, statements by "; "
    return "; ".join(statements)
  return ("\n" + before).join(statements)


def rewrite_text(text: str) -> str:
  """``text`` with every reference to a moved module pointed at its room."""
  text = FROM_IMPORT.sub(lambda m: _rewrite_from_import(m, text), text)
  text = DOTTED.sub(lambda m: new_module(m.group(1)), text)
  return PATH.sub(_path, text)


def _path(m: re.Match) -> str:
  return f"andrea_jax/{ROOM_OF[m.group(1)]}/{m.group(1)}"


def _statements(lines: list[str], start: int, indent: str) -> list[tuple[int, int]]:
  """The ``andrea_jax`` import statements at ``indent`` from line ``start`` on, consecutive:
  ``[(first line, end line)]`` (a parenthesised import spans its continuation lines)."""
  out, i = [], start
  while i < len(lines):
    m = IMPORT_LINE.match(lines[i])
    if not m or m.group("indent") != indent:
      break
    j, depth = i, lines[i].count("(") - lines[i].count(")")
    while depth > 0 and j + 1 < len(lines):
      j += 1
      depth += lines[j].count("(") - lines[j].count(")")
    out.append((i, j + 1))
    i = j + 1
  return out


def _sort_key(statement: list[str]) -> tuple[str, str]:
  m = IMPORT_LINE.match(statement[0])
  module = m.group("from") or m.group("import")
  rest = statement[0][m.end():].split("#")[0] if m.group("from") else ""
  return module, rest.strip().lstrip("(").lower()


def sort_changed_import_runs(old: str, new: str) -> str:
  """``new`` with each run of consecutive ``andrea_jax`` import statements sorted, where the
  run holds a line ``old`` does not (a line the rewrite made)."""
  before, lines = set(old.split("\n")), new.split("\n")
  i = 0
  while i < len(lines):
    m = IMPORT_LINE.match(lines[i])
    if not m:
      i += 1
      continue
    spans = _statements(lines, i, m.group("indent"))
    end = spans[-1][1]
    if any(line not in before for line in lines[i:end]):
      statements = sorted((lines[a:b] for a, b in spans), key=_sort_key)
      lines[i:end] = [line for s in statements for line in s]
    i = end
  return "\n".join(lines)


def _open_paren(line: str) -> int | None:
  """The column of the innermost ``(`` still open at the end of ``line``, or None."""
  stack = []
  for column, char in enumerate(line):
    if char == "(":
      stack.append(column)
    elif char == ")" and stack:
      stack.pop()
  return stack[-1] if stack else None


def rewrite_python(text: str) -> str:
  """``rewrite_text`` for Python source, its import runs sorted again, and the continuation
  lines of a changed line that were aligned under its open ``(`` kept aligned there."""
  lines = FROM_IMPORT.sub(lambda m: _rewrite_from_import(m, text), text).split("\n")
  shift, out = None, []
  for line in lines:
    new = PATH.sub(_path, DOTTED.sub(lambda m: new_module(m.group(1)), line))
    if shift is not None:  # a continuation line of a changed import
      old_column, new_column, depth = shift
      indent = len(line) - len(line.lstrip())
      if indent == old_column and new_column != old_column:
        new = " " * new_column + new.lstrip()
      depth += line.count("(") - line.count(")")
      shift = (old_column, new_column, depth) if depth > 0 else None
    elif new != line and _open_paren(line) is not None:
      shift = (_open_paren(line) + 1, _open_paren(new) + 1, line.count("(") - line.count(")"))
    out.append(new)
  return sort_changed_import_runs(text, "\n".join(out))


def rewrite_notebook(raw: str) -> str:
  """A notebook's JSON with its cells' sources rewritten (``raw`` itself if none changed)."""
  notebook, changed = json.loads(raw), False
  for cell in notebook.get("cells", []):
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    new = (rewrite_python if cell.get("cell_type") == "code" else rewrite_text)(source)
    if new != source:
      cell["source"] = new.splitlines(keepends=True) if isinstance(cell["source"], list) else new
      changed = True
  return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n" if changed else raw


def rewrite_file(path: str) -> bool:
  """Rewrite ``path`` in place; whether it changed."""
  try:
    with open(path, encoding="utf-8") as f:
      old = f.read()
  except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
    return False
  if "andrea_jax" not in old:
    return False
  if path.endswith(".ipynb"):
    new = rewrite_notebook(old)
  elif path.endswith(".py"):
    new = rewrite_python(old)
  else:
    new = rewrite_text(old)
  if new == old:
    return False
  with open(path, "w", encoding="utf-8") as f:
    f.write(new)
  return True


def move() -> None:
  """``git mv andrea_jax/X.py andrea_jax/ROOM/X.py`` for every module still in its old place."""
  for room, modules in ROOMS.items():
    os.makedirs(os.path.join("andrea_jax", room), exist_ok=True)
    for module in modules:
      old, new = f"andrea_jax/{module}.py", f"andrea_jax/{room}/{module}.py"
      if os.path.exists(old) and not os.path.exists(new):
        subprocess.run(["git", "mv", old, new], check=True)
      elif os.path.exists(old):
        sys.exit(f"both {old} and {new} exist: merge them by hand, then rerun")


def tracked_files() -> list[str]:
  out = subprocess.run(["git", "ls-files", "-z"], check=True, capture_output=True).stdout
  return [p for p in out.decode().split("\0") if p and not p.startswith("wip/")]


def main(argv: list[str]) -> int:
  if argv[:1] == ["--move"]:
    move()
    return 0
  check = argv[:1] == ["--check"]
  paths = tracked_files() if argv[:1] == ["--all"] else argv[1:] if check else argv
  if check:
    changed = []
    for path in paths:
      with open(path, encoding="utf-8", errors="replace") as f:
        old = f.read()
      new = (rewrite_notebook(old) if path.endswith(".ipynb") else
             rewrite_python(old) if path.endswith(".py") else rewrite_text(old))
      if new != old:
        changed.append(path)
    print("\n".join(changed))
    return 1 if changed else 0
  for path in paths:
    if rewrite_file(path):
      print(path)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
