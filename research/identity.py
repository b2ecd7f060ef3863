"""The identity of a study's rules: what a sweep records as the rules that will judge it, and what the report says of it.

The rules are the top-level definitions the study's roots reach in its rule modules, each
hashed by its normalised source (no docstrings, annotations or module aliases), so moves and
re-documentation keep the digest. ``rules_version`` is the sweep.json record, ``compare``
checks a record against the rules now, ``rules_lines`` is the report's sentence.
"""

from __future__ import annotations

import ast
import collections
import copy
import dataclasses
import hashlib
import pathlib
import subprocess
from typing import Iterable

from research import registry
from research.provenance import ROOT, git

# The rule modules every study shares, after its own file and the framework's (repository-relative).
SHARED_MODULES = ("research/claims.py", "research/curves.py", "research/stats.py")
# The framework modules a one-file study's definitions are hashed with.
KINDS = ("base", "contrast", "zloss", "choice", "recipe")
FRAMEWORK_MODULES = ("research/study.py", "research/kinds.py", *(f"research/kind_{k}.py" for k in KINDS),
                     "research/ladder.py", "research/optimum.py", "research/rate_check.py")
# Kind modules key a name two modules share as ``NAN (research/kinds.py)``, keeping old records' keys.
KIND_MODULES = {f"research/kind_{k}.py": "research/kinds.py" for k in KINDS}
# Where every study's rules start (each study is one file).
FILE_ROOTS = ("STUDY", "judge", "decide")


def study_modules(study: str) -> tuple[str, ...]:
  """The rule modules of ``study``, its own file first (``registry.source``)."""
  return (registry.source(study), *FRAMEWORK_MODULES, *SHARED_MODULES)


# ----------------------------------------------------------------------------- one module


def _path(dotted: str) -> str:
  return dotted.replace(".", "/") + ".py"


def _strip(node: ast.AST) -> ast.AST:
  """Docstrings and annotations out (neither changes what a rule computes)."""
  for n in ast.walk(node):
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      if ast.get_docstring(n, clean=False) is not None:
        n.body = n.body[1:] or [ast.Pass()]
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
      n.returns = None
    elif isinstance(n, ast.arg):
      n.annotation = None
  return node


def _parse(text: str) -> ast.Module:
  """``ast.parse``, retried once on CPython 3.11's spurious "recursion depth mismatch"
  SystemError (python/cpython#106905, a thread race)."""
  try:
    return ast.parse(text)
  except SystemError as e:
    if "recursion depth mismatch" not in str(e):
      raise
    return ast.parse(text)


@dataclasses.dataclass
class _Module:
  """One rule module's top-level definitions and how its names reach the other rule modules."""
  path: str
  units: dict[str, ast.AST]  # name -> definition (tuple assignments split per name)
  aliases: dict[str, str]  # local name -> the rule module it stands for
  imported: dict[str, tuple[str, str]]  # local name -> (rule module, name there)

  def _aliased(self, node: ast.AST) -> bool:
    """Whether ``node`` is ``V.X`` with ``V`` a rule module's alias."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
        and node.value.id in self.aliases

  @classmethod
  def parse(cls, path: str, text: str, rule_paths: set[str]) -> "_Module":
    units, aliases, imported = {}, {}, {}
    for node in _parse(text).body:
      if isinstance(node, ast.Import):
        for a in node.names:
          if a.asname and _path(a.name) in rule_paths:
            aliases[a.asname] = _path(a.name)
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        for a in node.names:
          local = a.asname or a.name
          if _path(f"{node.module}.{a.name}") in rule_paths:
            aliases[local] = _path(f"{node.module}.{a.name}")
          elif _path(node.module) in rule_paths:
            imported[local] = (_path(node.module), a.name)
      elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        units[node.name] = node
      elif isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
          if isinstance(t, ast.Name):
            units[t.id] = node
          elif (isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple)
                and len(t.elts) == len(node.value.elts)):
            for name, value in zip(t.elts, node.value.elts):
              if isinstance(name, ast.Name):
                units[name.id] = ast.Assign(targets=[ast.Name(name.id, ast.Store())], value=value)
    return cls(path, units, aliases, imported)

  def alias_of(self, name: str) -> tuple[str, str] | None:
    """``(module, name)`` when ``name`` only re-exports another rule module's (``X = V.X``)."""
    if name in self.imported:
      return self.imported[name]
    node = self.units.get(name)
    if isinstance(node, ast.Assign) and self._aliased(node.value):
      return self.aliases[node.value.value.id], node.value.attr
    return None

  def normalised(self, name: str) -> str:
    """The source as hashed: ``_strip``-ped, module aliases dropped, unparsed."""
    node = _strip(copy.deepcopy(self.units[name]))
    for n in ast.walk(node):
      for field, value in ast.iter_fields(n):
        if self._aliased(value):
          setattr(n, field, ast.Name(value.attr, value.ctx))
        elif isinstance(value, list):
          setattr(n, field, [ast.Name(v.attr, v.ctx) if self._aliased(v) else v for v in value])
    renamed = {local: name for local, (_, name) in self.imported.items() if local != name}
    for n in ast.walk(node):
      if isinstance(n, ast.Name) and n.id in renamed:
        n.id = renamed[n.id]
    return ast.unparse(ast.fix_missing_locations(node))

  def references(self, name: str) -> Iterable[tuple[str, str]]:
    """What the definition names: ``(module, name)`` here, imported or through an alias."""
    for n in ast.walk(self.units[name]):
      if isinstance(n, ast.Name):
        yield self.path, n.id
      elif self._aliased(n):
        yield self.aliases[n.value.id], n.attr


# ----------------------------------------------------------------------------- a rule set


def definitions(sources: dict[str, str], roots: Iterable[str]) -> dict[str, tuple[str, str]]:
  """``{name: (module, digest)}`` of what ``roots`` reach in ``sources`` (``{path: text}``, the
  study's own first); a name two definitions share is keyed ``name (module)``."""
  modules = {p: _Module.parse(p, t, set(sources)) for p, t in sources.items()}
  order = list(sources)

  def resolve(path: str, name: str, seen=()) -> tuple[str, str] | None:
    mod = modules.get(path)
    if mod is None or (path, name) in seen:
      return None
    alias = mod.alias_of(name)
    if alias is not None:
      return resolve(*alias, seen + ((path, name),))
    return (path, name) if name in mod.units else None

  # Each root from the first module that has it, then every definition those reach.
  todo = [next(filter(None, (resolve(p, root) for p in order)), None) for root in roots]
  reached = set()
  while todo:
    found = todo.pop()
    if found and found not in reached:
      reached.add(found)
      todo.extend(resolve(*ref) for ref in modules[found[0]].references(found[1]))
  names = collections.Counter(n for _, n in reached)
  out = {}
  for path, name in sorted(reached, key=lambda r: (order.index(r[0]), r[1])):
    key = name if names[name] == 1 else f"{name} ({KIND_MODULES.get(path, path)})"
    out[key] = (path, hashlib.sha256(modules[path].normalised(name).encode()).hexdigest()[:12])
  return out


def identity(defs: dict[str, tuple[str, str]]) -> str:
  """One hash over the definitions' names and digests (not their modules: a move keeps it)."""
  lines = "".join(f"{name} {digest}\n" for name, (_, digest) in sorted(defs.items()))
  return hashlib.sha256(lines.encode()).hexdigest()[:16]


def _read(paths: Iterable[str]) -> dict[str, str]:
  return {p: pathlib.Path(ROOT, p).read_text(encoding="utf-8") for p in paths}


def rules_version(study: str) -> dict:
  """The sweep.json record of ``study``'s rules now: digests, hash, last commit, dirty flag."""
  modules = study_modules(study)
  defs = definitions(_read(modules), FILE_ROOTS)
  try:
    commit = git("log", "-1", "--format=%H", "--", *modules).strip() or None
    dirty = bool(git("status", "--porcelain", "--", *modules).strip())
  except (OSError, subprocess.SubprocessError):
    commit, dirty = None, None
  return {"form": "definitions", "sha256": identity(defs), "commit": commit,
          "uncommitted_changes": dirty, "modules": list(modules),
          "definitions": {name: list(d) for name, d in defs.items()}}


# ----------------------------------------------------------------------------- checking a record


@dataclasses.dataclass
class Comparison:
  """A recorded identity against the rules now, definition by definition."""
  checked: bool
  reason: str = ""  # why a record could not be checked
  moved: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # name, from, to
  changed: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
  added: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # name, module
  removed: list[tuple[str, str]] = dataclasses.field(default_factory=list)

  @property
  def same(self) -> bool:
    """No definition changed, came or went (moves allowed)."""
    return self.checked and not (self.changed or self.added or self.removed)


def compare(recorded: dict, study: str) -> Comparison:
  """``recorded`` (a sweep.json ``rules``) against ``study``'s rules now."""
  if recorded.get("form") != "definitions":  # the file form that preceded it
    return Comparison(False, "it records a content hash of files, not their definitions")
  old = {k: tuple(v) for k, v in recorded["definitions"].items()}
  now = definitions(_read(study_modules(study)), FILE_ROOTS)
  out = Comparison(True)
  for name in sorted(set(old) | set(now), key=lambda n: (n not in old, n)):
    if name not in now:
      out.removed.append((name, old[name][0]))
    elif name not in old:
      out.added.append((name, now[name][0]))
    elif old[name][1] != now[name][1]:
      out.changed.append((name, old[name][0], now[name][0]))
    elif old[name][0] != now[name][0]:
      out.moved.append((name, old[name][0], now[name][0]))
  return out


def _names(items, most: int = 0) -> str:
  """```a`, `b` (from → to)``, grouped by where they are; past ``most`` (if given), counts per route."""
  where = lambda item: " → ".join(dict.fromkeys(item[1:]))  # (name, module) or (name, from, to)
  if most and len(items) > most:
    counts = collections.Counter(map(where, items))
    return f"{len(items)} definitions (" + "; ".join(f"{n} {w}" for w, n in counts.items()) + ")"
  groups: dict[str, list[str]] = {}
  for item in items:
    groups.setdefault(where(item), []).append(f"`{item[0]}`")
  return "; ".join(f"{', '.join(names)} ({w})" for w, names in groups.items())


def rules_lines(recorded: dict | None, study: str) -> list[str]:
  """The report's line on which rules judged the study, and what changed since the run."""
  if not recorded:
    now = rules_version(study)
    first, rest = now["modules"][0], len(now["modules"]) - 1
    return [f"Rules: `{first}` with {rest} shared rule modules (research/identity.py) at rules hash "
            f"{now['sha256']}; the sweep recorded no rules of its own (it predates the record)."]
  kind = "rules hash" if recorded.get("form") == "definitions" else "content hash"
  at = f"commit {(recorded.get('commit') or '?')[:12]}, {kind} {recorded.get('sha256')}"
  if recorded.get("uncommitted_changes"):
    at += ", **with uncommitted changes at run time**"
  c = compare(recorded, study)
  if c.same:
    since = f"; moved since without change: {_names(c.moved, 6)}" if c.moved else ", unchanged since"
    return [f"Rules: judged with the rules fixed before the run ({at}){since}."]
  now = rules_version(study)
  head = (f"Rules: **re-judged with rules changed since the run.** The run was made with the "
          f"rules of {at}; these verdicts come from rules hash {now['sha256']} (last commit "
          f"{now['commit'] or '?'}).")
  if not c.checked:
    return [f"{head} The run's rules cannot be compared with them: {c.reason}."]
  parts = [f"{label}: {_names(items, most)}" for label, items, most in (
      ("changed", c.changed, 6), ("added", c.added, 0), ("removed", c.removed, 0),
      ("moved without change", c.moved, 6)) if items]
  files = " ".join(dict.fromkeys([*recorded.get("modules", ()), *now["modules"]]))
  return [f"{head} Since the run, " + "; ".join(parts) + f". What changed: "
          f"`git diff {recorded.get('commit') or '<run commit>'} {now['commit'] or 'HEAD'} -- {files}`."]
