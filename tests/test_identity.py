"""The rules' identity: a moved but unchanged rule is recognised, a changed one is named, and the old file-form records were migrated faithfully.

The norm x MLP study's rules, a package of rule modules until it became one file
(experiments/studies/norm_mlp.py), are the subject of most tests: ``package`` makes the
identity read them, and the shared modules, as they were at ``PACKAGE_COMMIT``.
"""

import ast
import hashlib
import json
import os
import re
import subprocess

import pytest

from research import identity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit with the norm x MLP study's package (its grid.py, rules.py, report.py).
PACKAGE_COMMIT = "d395ece2328b8f8f02c3dadea39738e36ed7e0f7"
PACKAGE_MODULES = ("experiments/studies/norm_mlp/rules.py", *identity.SHARED_MODULES)
FILE_ROOTS = identity.FILE_ROOTS


@pytest.fixture
def package(monkeypatch):
  """The identity of study ``norm_mlp`` computed from its package's rule modules (rules.py, then
  the shared ones), read from git at ``PACKAGE_COMMIT``, its ``RULE_ROOTS`` among every study's roots."""
  def show(path):
    return subprocess.run(["git", "show", f"{PACKAGE_COMMIT}:{path}"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
  try:
    texts = {p: show(p) for p in PACKAGE_MODULES}
  except (OSError, subprocess.CalledProcessError):
    pytest.skip("the package's commit is not in this clone's history (a shallow clone?)")
  roots = next(ast.literal_eval(n.value) for n in ast.parse(texts[PACKAGE_MODULES[0]]).body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RULE_ROOTS")
  modules, read = identity.study_modules, identity._read
  monkeypatch.setattr(identity, "study_modules", lambda s: PACKAGE_MODULES if s == "norm_mlp" else modules(s))
  monkeypatch.setattr(identity, "FILE_ROOTS", (*identity.FILE_ROOTS, *roots))
  monkeypatch.setattr(identity, "_read", lambda paths: {
      p: texts[p] if p in texts else read([p])[p] for p in paths})
  return texts


def test_a_definition_keeps_its_digest_when_moved_reformatted_or_redocumented():
  one = {"a.py": "from b import helper\nimport b as B\n\n"
                 "def rule(x: int) -> int:\n  '''Doc.'''\n  return B.helper(x) + LIMIT\n\nLIMIT = 3\n",
         "b.py": "def helper(x):\n  return 2 * x\n\ndef unused():\n  return 0\n"}
  # rule and LIMIT moved into b.py, reformatted, without docstring or annotations.
  two = {"a.py": "import b\n\ndef judge(x):\n  return b.rule(x)\n",
         "b.py": "LIMIT = 3\n\ndef helper(x):\n    return 2 * x\n\n"
                 "def rule(x):\n    return helper(x) + LIMIT  # a comment\n"}
  old, new = identity.definitions(one, ["rule"]), identity.definitions(two, ["rule"])
  assert set(old) == set(new) == {"rule", "helper", "LIMIT"}  # unused is not reached
  assert {k: d for k, (_, d) in old.items()} == {k: d for k, (_, d) in new.items()}
  assert old["rule"][0] == "a.py" and new["rule"][0] == "b.py"
  assert identity.identity(old) == identity.identity(new)
  changed = identity.definitions({**two, "b.py": two["b.py"].replace("LIMIT = 3", "LIMIT = 4")}, ["rule"])
  assert changed["LIMIT"][1] != new["LIMIT"][1] and changed["rule"][1] == new["rule"][1]
  assert identity.identity(changed) != identity.identity(new)


def _joined_file_form() -> str:
  """The norm x MLP study's rules as one file, the way experiments/verdicts.py held them
  before the split: its rules.py, claims.py and curves.py in one module, their references
  to one another bare."""
  parts = []
  for path, text in identity._read(identity.study_modules("norm_mlp")[:3]).items():
    text = "\n".join(l for l in text.splitlines() if not l.startswith(("from ", "import ")))
    parts.append(re.sub(r"\b(curves|claims)\.(?=\w)", "", text))
  return ("import dataclasses\nimport math\nfrom collections import defaultdict\n"
          "import numpy as np\nfrom experiments import stats\nfrom experiments.stats import Effect\n"
          + "\n".join(parts))


def _record(sources: dict[str, str]) -> dict:
  """A definitions record of ``sources`` at a made-up commit."""
  defs = identity.definitions(sources, identity.FILE_ROOTS)
  return {"form": "definitions", "sha256": identity.identity(defs), "commit": "c0ffee",
          "uncommitted_changes": False, "modules": list(sources),
          "definitions": {name: list(d) for name, d in defs.items()}}


def test_a_record_of_rules_moved_without_change_is_recognised(package):
  stats_now = package["research/stats.py"]
  record = _record({"experiments/verdicts.py": _joined_file_form(), "experiments/stats.py": stats_now})
  c = identity.compare(record, "norm_mlp")
  assert c.checked and c.same and not (c.changed or c.added or c.removed)
  moved = {name: (old, new) for name, old, new in c.moved}
  assert moved["fit_optimum"] == ("experiments/verdicts.py", "research/curves.py")
  assert moved["claim_warmup"] == ("experiments/verdicts.py", "experiments/studies/norm_mlp/rules.py")
  assert moved["decide"] == ("experiments/verdicts.py", "research/claims.py")
  assert moved["one_sample"] == ("experiments/stats.py", "research/stats.py")
  line, = identity.rules_lines(record, "norm_mlp")
  assert line.startswith("Rules: judged with the rules fixed before the run (commit c0ffee, rules "
                         f"hash {record['sha256']}); moved since without change: ")
  assert "21 experiments/verdicts.py → research/curves.py" in line  # past six names, counts by route
  assert "re-judged" not in line


def test_a_changed_rule_is_named_exactly(package):
  text = _joined_file_form()
  assert "WARMUP_MARGIN = 0.05" in text and "return e.defined and e.hi < -LEARNS_BY" in text
  text = text.replace("WARMUP_MARGIN = 0.05", "WARMUP_MARGIN = 0.1").replace(
      "return e.defined and e.hi < -LEARNS_BY", "return e.defined and e.hi < -2 * LEARNS_BY")
  text += "\n\ndef _gone(runs):\n  return runs\n"
  text = re.sub(r"def claim_warmup\(runs[^)]*\)[^:]*:", "def claim_warmup(runs):\n  _gone(runs)", text)
  stats_now = package["research/stats.py"]
  record = _record({"experiments/verdicts.py": text, "experiments/stats.py": stats_now})
  c = identity.compare(record, "norm_mlp")
  assert c.checked and not c.same
  assert [n for n, _, _ in c.changed] == ["WARMUP_MARGIN", "claim_warmup", "learns"]
  assert c.removed == [("_gone", "experiments/verdicts.py")] and c.added == []
  line, = identity.rules_lines(record, "norm_mlp")
  assert "**re-judged with rules changed since the run.**" in line
  assert ("changed: `WARMUP_MARGIN`, `claim_warmup` (experiments/verdicts.py → "
          "experiments/studies/norm_mlp/rules.py); `learns` (experiments/verdicts.py → "
          "research/curves.py); removed: `_gone` (experiments/verdicts.py); moved without change: ") in line
  assert "git diff c0ffee" in line


def test_a_record_of_another_form_cannot_be_compared_and_says_so(package):
  record = {"sha256": "0" * 16, "commit": "c0ffee", "uncommitted_changes": False, "files": ["a.py"]}
  c = identity.compare(record, "norm_mlp")
  assert not c.checked and "not their definitions" in c.reason
  line, = identity.rules_lines(record, "norm_mlp")
  assert "re-judged" in line and "content hash " + "0" * 16 in line and "cannot be compared" in line
  assert "predates" in identity.rules_lines(None, "norm_mlp")[0]


def test_a_definitions_record_is_checked_against_the_rules_now(package):
  # A study of a package (norm_mlp's rules.py, read from git: ``package``) and one of one
  # file (its STUDY record).
  for study, module, name in (("norm_mlp", "experiments/studies/norm_mlp/rules.py", "claim_warmup"),
                              ("proxies", "experiments/studies/proxies.py", "STUDY")):
    now = identity.rules_version(study)
    assert now["form"] == "definitions" and len(now["sha256"]) == 16
    assert now["modules"][0] == module
    line, = identity.rules_lines(json.loads(json.dumps(now)), study)  # as read back from sweep.json
    assert "fixed before the run" in line and "unchanged since" in line
    module, _ = now["definitions"][name]
    edited = {**now, "definitions": {**now["definitions"], name: [module, "0" * 12]}}
    c = identity.compare(edited, study)
    assert [n for n, _, _ in c.changed] == [name] and not (c.added or c.removed or c.moved)
    assert f"changed: `{name}`" in identity.rules_lines(edited, study)[0]
  norm, proxies = identity.rules_version("norm_mlp"), identity.rules_version("proxies")
  assert "claim_warmup" not in proxies["definitions"] and "predict" not in norm["definitions"]
  assert norm["definitions"]["fit_optimum"] == proxies["definitions"]["fit_optimum"]


# The files a file-form record hashed when it names none.
FILE_FORM_FILES = ("experiments/verdicts.py", "experiments/stats.py")


def migrated(record: dict, show) -> dict:
  """A file-form record (the content hash of its ``files`` at its commit, read by ``show(commit,
  path)``) as a definitions record: the definitions those files held, its own fields under ``file_form``."""
  files = record.get("files") or FILE_FORM_FILES
  sources = {p: show(record["commit"], p) for p in files}
  assert hashlib.sha256("".join(sources.values()).encode()).hexdigest()[:16] == record["sha256"]
  defs = identity.definitions(sources, identity.FILE_ROOTS)
  return {"form": "definitions", "sha256": identity.identity(defs), "commit": record["commit"],
          "uncommitted_changes": record["uncommitted_changes"], "modules": list(files),
          "definitions": {name: list(d) for name, d in defs.items()},
          "file_form": {k: v for k, v in record.items() if k not in ("commit", "uncommitted_changes")}}


def _git_show(commit: str, path: str) -> str:
  return subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True,
                        check=True).stdout


@pytest.mark.parametrize("study", ["norm_mlp-cpu", "proxies-cpu"])
def test_the_committed_studies_records_are_rebuilt_from_git(study, package):
  """Two packs ran before the definitions form: their sweep.json recorded the content hash of the
  rule files at the run's commit (kept under ``file_form``). Their records were migrated once
  (``migrated``): those files, read from git, hash to that content hash and give the recorded
  definitions, which the rules now are compared with."""
  recorded = json.load(open(os.path.join(ROOT, "results", study, "sweep.json")))["rules"]
  known = subprocess.run(["git", "cat-file", "-e", f"{recorded['commit']}^{{commit}}"], cwd=ROOT,
                         capture_output=True)
  if known.returncode:
    pytest.skip("the recorded commit is not in this clone's history (a shallow clone?)")
  with pytest.MonkeyPatch.context() as m:
    m.setattr(identity, "FILE_ROOTS", FILE_ROOTS)  # every study's roots, without the package's
    original = {"commit": recorded["commit"], "uncommitted_changes": recorded["uncommitted_changes"],
                **recorded["file_form"]}
    assert migrated(original, _git_show) == recorded
  c = identity.compare(recorded, study.split("-")[0])
  assert c.checked, c.reason
  moved = {name: new for name, _, new in c.moved}
  assert moved["fit_optimum"] == moved["sensitivity"] == "research/curves.py"
  assert moved["robustness"] == "research/claims.py"
  assert moved["one_sample"] == "research/stats.py"


PACKS = sorted(p for p in os.listdir(os.path.join(ROOT, "results"))
               if os.path.exists(os.path.join(ROOT, "results", p, "sweep.json")) and not p.endswith("-smoke"))


@pytest.mark.parametrize("pack", PACKS)
def test_every_committed_pack_is_judged_by_its_recorded_rules_or_their_re_expression(pack):
  """The claim kinds were split into modules and folded into fewer kinds (issue 58): each
  committed pack's report says its rules are those recorded before the run (moved or not), or
  a re-expression of them that gives the recorded verdicts (verdicts_before.json), never that
  the verdicts differ."""
  from research import cells as cells_lib  # pylint: disable=import-outside-toplevel
  from research import registry  # pylint: disable=import-outside-toplevel
  from research import report  # pylint: disable=import-outside-toplevel
  index, cells, _ = cells_lib.load(os.path.join(ROOT, "results", pack))
  study = registry.study_of(index)
  line = " ".join(report.rules_line(os.path.join(ROOT, "results", pack), index, study,
                                    registry.study(study).judge(cells, robust=False)))
  assert "fixed before the run" in line or "re-expressed, same verdicts" in line, line
  assert "differs" not in line


def test_a_spurious_ast_depth_mismatch_is_parsed_again(monkeypatch):
  """CPython 3.11's "AST constructor recursion depth mismatch" (python/cpython#106905) can
  trip a parse that races another thread's; it failed the suite once. The definitions are
  read on a second parse; any other SystemError still propagates."""
  text = "STUDY = 1\n\ndef judge():\n  return STUDY\n"
  want = identity.identity(identity.definitions({"a/s.py": text}, identity.FILE_ROOTS))
  real, calls = ast.parse, []

  def flaky(source, *args, message="AST constructor recursion depth mismatch (before=147, after=199)",
            **kwargs):
    calls.append(1)
    if len(calls) == 1:
      raise SystemError(message)
    return real(source, *args, **kwargs)

  monkeypatch.setattr(ast, "parse", flaky)
  assert identity.identity(identity.definitions({"a/s.py": text}, identity.FILE_ROOTS)) == want
  calls.clear()
  monkeypatch.setattr(ast, "parse", lambda *a, **k: flaky(*a, message="something else", **k))
  with pytest.raises(SystemError, match="something else"):
    identity.definitions({"a/s.py": text}, identity.FILE_ROOTS)
