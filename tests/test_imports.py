"""Imports run one way: no module imports itself through others, and the layers never upward.

Every module of ``andrea_jax/``, ``research/``, ``experiments/`` and ``benchmarks/`` is parsed
with ``ast`` (nothing is imported or run); its imports, at module level and inside functions
alike, are the edges of a graph among the project's modules. The layers, top to bottom:
``experiments`` and ``benchmarks`` (commands, configs, studies, measurements) over
``research`` (the study framework) over ``andrea_jax`` (the model, its training, data and
checkpoints), with ``andrea_jax/tools`` beside the core, never under it.

Imports by name at run time (``importlib.import_module(name)``) are not edges: only ``import``
statements are read. The research framework names no module of the layers above it, not even
to ``importlib``: the commands register their studies with it (``research.registry.register``).
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("andrea_jax", "research", "experiments", "benchmarks")

# Import cycles inside the studies, known and tolerated until the studies are re-expressed on
# the research framework: removed when the studies are re-expressed (issue 43). Each entry is
# one strongly connected component (every module in it reaches every other); only cycles
# wholly inside experiments/studies/ may be listed, and an entry that no longer holds fails.
# None is left (zloss and norm_mlp_confirm, grid <-> plan, went with their packages); the
# mechanism stays for the next.
KNOWN_STUDY_CYCLES: tuple[frozenset[str], ...] = ()


def module_files() -> dict[str, str]:
  """``{dotted module name: path}`` of every ``.py`` file in ``PACKAGES`` (a package by its
  ``__init__.py``)."""
  out = {}
  for package in PACKAGES:
    for directory, dirs, names in os.walk(os.path.join(ROOT, package)):
      dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
      for name in sorted(n for n in names if n.endswith(".py")):
        path = os.path.join(directory, name)
        parts = os.path.relpath(path, ROOT)[:-len(".py")].split(os.sep)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return out


def found_outside(home: str, find) -> dict[str, list]:
  """``{module: find(its source)}`` for every module but ``home`` where ``find`` finds something:
  the guards that a concept is written in its one home alone."""
  found = {}
  for module, path in module_files().items():
    if module != home:
      with open(path) as f:
        hits = find(f.read())
      if hits:
        found[module] = hits
  return found


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
  """Every dotted name ``source`` imports, anywhere in it: ``import a.b`` gives ``a.b``,
  ``from a import b`` gives ``a.b`` (a module or a name in ``a``), relative imports resolved
  against ``module``."""
  out = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[:len(package) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
      out.update(f"{base}.{alias.name}" for alias in node.names)
  return out


def resolve(name: str, modules) -> str | None:
  """The project module ``name`` loads: the longest prefix of it that is one (``a.b.f`` ->
  ``a.b``), or None for a module outside the project."""
  parts = name.split(".")
  for n in range(len(parts), 0, -1):
    if ".".join(parts[:n]) in modules:
      return ".".join(parts[:n])
  return None


def import_graph() -> dict[str, set[str]]:
  """``{module: the project modules it imports}`` over ``PACKAGES``."""
  files = module_files()
  graph = {}
  for module, path in files.items():
    with open(path, encoding="utf-8") as f:
      names = imported_names(f.read(), module, path.endswith("__init__.py"))
    graph[module] = {m for m in (resolve(n, files) for n in names) if m and m != module}
  return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
  """The import cycles of ``graph``: its strongly connected components of more than one
  module (Tarjan's algorithm), or a module that imports itself."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = set()
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.add(w)
        if w == v:
          break
      if len(component) > 1 or v in graph.get(v, ()):
        out.append(frozenset(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def path_around(graph: dict[str, set[str]], component: frozenset[str]) -> str:
  """One shortest cycle through ``component``'s first module, to name in a failure:
  ``a -> b -> a``."""
  start = min(component)
  parent, frontier = {start: None}, [start]
  while frontier:  # breadth first inside the component, until an edge leads back to start
    v = frontier.pop(0)
    for w in sorted(graph[v] & component):
      if w == start:
        path = [v]
        while parent[path[-1]] is not None:
          path.append(parent[path[-1]])
        return " -> ".join([*reversed(path), start])
      if w not in parent:
        parent[w] = v
        frontier.append(w)
  return " -> ".join(sorted(component))


@pytest.fixture(scope="module")
def graph():
  return import_graph()


# ----------------------------------------------------------------------------- the checker itself


def test_the_cycle_finder_finds_a_planted_cycle_and_nothing_else():
  g = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
  assert sorted(map(sorted, cycles(g))) == [["a", "b", "c"], ["e"]]
  assert path_around(g, frozenset({"a", "b", "c"})) == "a -> b -> c -> a"
  assert path_around(g, frozenset({"e"})) == "e -> e"
  assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []  # a chain is no cycle


def test_imports_are_read_at_module_and_function_level_and_relative_ones_resolved():
  source = ("import os\nimport andrea_jax.model\nfrom research import cells as c\n"
            "def f():\n  from experiments.configs import common\n  from . import sibling\n"
            "  from ..up import thing\n")
  names = imported_names(source, "pkg.sub.mod", is_package=False)
  assert names == {"os", "andrea_jax.model", "research.cells", "experiments.configs.common",
                   "pkg.sub.sibling", "pkg.up.thing"}
  modules = {"andrea_jax", "andrea_jax.model", "research.cells"}
  assert resolve("andrea_jax.model.ModelConfig", modules) == "andrea_jax.model"
  assert resolve("numpy.linalg", modules) is None


def test_a_planted_cycle_in_the_project_graph_is_found(graph):
  planted = {m: set(ws) for m, ws in graph.items()}
  planted["andrea_jax.errors"].add("andrea_jax.train")  # train reaches errors: a circle
  found = [c for c in cycles(planted) if c not in KNOWN_STUDY_CYCLES]
  assert len(found) == 1 and {"andrea_jax.errors", "andrea_jax.train"} <= found[0]


def test_the_graph_holds_every_package_and_its_edges(graph):
  assert {"andrea_jax.train", "andrea_jax.tools.lens", "research.runner", "experiments.run",
          "benchmarks.quickstart"} <= set(graph)
  assert "andrea_jax.workdir" in graph["andrea_jax.train"]
  assert "andrea_jax.tools.lens" in graph["experiments.inspect"]


# ----------------------------------------------------------------------------- the rules


def test_no_module_imports_itself_through_others(graph):
  found = cycles(graph)
  new = [c for c in found if c not in KNOWN_STUDY_CYCLES]
  assert not new, "import cycles (break each, e.g. by moving what both need below them):\n" + (
      "\n".join(path_around(graph, c) for c in new))
  gone = [sorted(c) for c in KNOWN_STUDY_CYCLES if c not in found]
  assert not gone, f"no longer cycles: delete them from KNOWN_STUDY_CYCLES: {gone}"
  for c in KNOWN_STUDY_CYCLES:
    assert all(m.startswith("experiments.studies.") for m in c), sorted(c)


def _imports_into(graph, importers, targets, allowed=frozenset()) -> list[str]:
  """``"m imports w"`` for each module ``m`` that ``importers`` selects (but ``allowed``)
  and each ``w`` it imports that is one of ``targets`` or inside one."""
  inside = lambda w: any(w == t or w.startswith(t + ".") for t in targets)
  return sorted(f"{m} imports {w}" for m, ws in graph.items()
                if importers(m) and m not in allowed for w in ws if inside(w))


def test_the_library_never_imports_the_layers_above_it_nor_its_tools(graph):
  core = lambda m: m.split(".")[0] == "andrea_jax" and not m.startswith("andrea_jax.tools")
  tools = lambda m: m.startswith("andrea_jax.tools")
  above = {"research", "experiments", "benchmarks"}
  assert _imports_into(graph, core, above | {"andrea_jax.tools"}) == []
  assert _imports_into(graph, tools, above) == []


def test_the_research_framework_never_imports_the_commands_and_studies(graph):
  research = lambda m: m.split(".")[0] == "research"
  assert _imports_into(graph, research, {"experiments", "benchmarks"}) == []


def names_loaded(source: str) -> list[str]:
  """The module names ``source`` hands ``importlib.import_module`` or ``__import__`` as text (an
  f-string by its fixed start: ``f"experiments.studies.{name}"`` gives ``experiments.studies.``)."""
  out = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Call) and node.args and (
        isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
        or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")):
      arg = node.args[0]
      first = arg.values[0] if isinstance(arg, ast.JoinedStr) and arg.values else arg
      if isinstance(first, ast.Constant) and isinstance(first.value, str):
        out.append(first.value)
  return out


def test_the_research_framework_loads_no_command_or_study_by_name():
  assert names_loaded('importlib.import_module(f"experiments.studies.{name}")\n'
                      'import_module(f"{package}.{name}")\n__import__("benchmarks.x")\n') == [
                          "experiments.studies.", "benchmarks.x"]
  files = module_files()
  loaded = sorted(f"{m} loads {n}" for m, path in files.items() if m.split(".")[0] == "research"
                  for n in names_loaded(open(path, encoding="utf-8").read())
                  if n.split(".")[0] in ("experiments", "benchmarks"))
  assert loaded == [], "research/ finds studies through research.registry.register, not by name"
