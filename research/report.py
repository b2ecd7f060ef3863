"""The report frame every study fills: REPORT.md, results.json, the rules line, packing, measured time.

A study's ``page(index, cells, out) -> Page`` (``research/page.py``) goes into the same frame
for every study (``write_report``), with guards (``research/guards.py``) and post-hoc readings
(``research/posthoc.py``). Committed reports live in ``docs/studies/<study>-<scale>/``, their
data in ``results/<study>-<scale>/``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import re

from andrea_jax.files import atomic_write, check_directory, make_directory, read_json
from research import cells as cells_lib
from research import claims
from research import guards
from research import identity
from research import posthoc
from research import registry
from research.page import Page


def diverged_text(cells: list[dict]) -> str:
  """``60 models, 30 diverged (...).`` per ``cells.diverged``, plus the guard's count where it differs."""
  n, guard = sum(map(cells_lib.diverged, cells)), sum(c["status"] == "diverged" for c in cells)
  return (f"{len(cells)} models, {n} diverged" + (
      f" ({n - guard} completed with a final loss above their loss at initialisation; the "
      f"divergence guard stopped {guard})" if n != guard else "") + ".")


def measured_time(cells: list[dict]) -> str:
  """The summed wall time of each program (a vmapped group, or a single run)."""
  programs: dict[str, float] = {}
  for c in cells:
    key = c.get("group") or c["name"]
    programs[key] = max(programs.get(key, 0.0), c.get("wall_time_s") or 0.0)
  return (f"Training time measured: {sum(programs.values()) / 60:.0f} minutes in {len(programs)} "
          f"program{'s' * (len(programs) != 1)} (the sum of each program's wall time: "
          f"compiles, evaluations and probes included, data preparation not).")


def write_report(study: str, sweep_dir: str, out: str | None = None, command: str = "",
                 pack: str | None = None) -> str:
  """Write REPORT.md and plots into ``out`` (default ``sweep_dir``); returns its path. ``pack``:
  pack the cells there first and report from there; no ``command``: keep the recorded one."""
  purpose = "for REPORT.md and its plots"
  if out:  # before anything is packed
    check_directory(out, "--out", purpose)
  if pack and os.path.abspath(pack) != os.path.abspath(sweep_dir):
    cells_lib.pack(sweep_dir, pack)
    command = " && ".join(filter(None, [command, f"python -m experiments.report --sweep_dir={sweep_dir} "
                                        f"--pack={pack}" + (f" --out={out}" if out else "")]))
    sweep_dir = pack
  # No command: the one results.json records as having produced the data.
  command = command or (read_json(os.path.join(sweep_dir, "results.json")) or {}).get("produced_by") or ""
  out = out or sweep_dir
  index, cells, source = cells_lib.load(sweep_dir)
  sweep_dir, out = shown_path(sweep_dir), shown_path(out)
  make_directory(out, "--out", purpose)
  definition = registry.study(study)
  page = definition.page(index, cells, out)
  frozen = page.verdicts
  page.verdicts, changed = guards.apply(definition, definition.data(cells), frozen)
  page.results["guarded"] = [{"claim": c, "frozen": a, "guarded": b} for c, a, b in changed]
  titles = {c.claim: guards.title(c) for c in definition.claims}
  sources = {c.claim: c.source for c in definition.claims if getattr(c, "source", "")}
  readings = posthoc.read(study, cells, out)
  notes = posthoc.pointers(readings)
  regenerate = f"python -m experiments.report --sweep_dir={sweep_dir}" + (
      f" --out={out}" if out != sweep_dir else "")
  design = guards.header(registry.design(study), registry.outside(study, "SAW_DATA"), changed)
  trained = " && ".join(c for c in command.split(" && ") if c and "experiments.report" not in c) or (
      f"python -m experiments.sweep --sweep={index['name']} --scale={index['scale']}" if index["scale"] != "?" else "")
  lines = ["## Appendix", "", *([design, ""] if design else []),
           "Produced by:", "", "```bash", *([trained] if trained else []), regenerate, "```", "",
           f"Read from {source}.", "", index.get("description", ""), "",
           f"{diverged_text(cells)} {measured_time(cells)}", "",
           *page.notes,
           "## Verdicts", "", page.method, "",
           *rules_line(sweep_dir, index, study, frozen), ""]
  for verdict in page.verdicts:
    lines += [f"### {titles.get(verdict.claim, verdict.claim)}", "", *verdict.markdown(), "",
              *([f"Its source (the paper's figure, the effect planned): {sources[verdict.claim]}.", ""]
                if verdict.claim in sources else []),
              *[line for note in notes.get(verdict.claim, []) for line in (note, "")]]
  lines += posthoc.section_lines(readings)
  for line in page.sections:  # a reading's pointer under the section it names
    lines += [line, *[x for note in notes.get(line.removeprefix("## "), []) for x in ("", note)]]
  lines += ["## Plots", "", *[f"![{p}]({p})" for p in page.plots if p]]
  if readings:
    page.results["posthoc"] = {r.title: r.results for r in readings}
  text = "\n".join(wrapped([*opening(study, index, cells, design, readings, page, titles, changed), *lines])) + "\n"
  for name in {k for c in cells for k in c.get("overrides", {}) if "_" in k}:
    text = text.replace(name.replace("_", " "), name)  # names as written in code: model.d_model
  path = os.path.join(out, "REPORT.md")
  atomic_write(path, text.encode("utf-8"))
  # results.json beside the data: for per-cell files or with ``pack``; never for committed (packed) cells otherwise.
  if pack or not source.endswith(cells_lib.PACKED):
    write_results(index, cells, page, sweep_dir, command)
  if pack and index.get("rules") and identity.compare(index["rules"], study).same:
    record_verdicts(study, index, frozen, sweep_dir)
  return path


def opening(study: str, index: dict, cells: list[dict], design: str, readings: list[posthoc.Reading], page: Page,
            titles: dict, changed: list) -> list[str]:
  """The front matter: title, abstract, claims table, main figure, limitations."""
  head = [f"# {title_of(registry.study(study).question)}", "",
          *[f"> **Superseded.** {line}" for line in registry.outside(study, "SUPERSEDED")],
          *([""] if registry.outside(study, "SUPERSEDED") else []),
          f"Study `{index['name']}` at scale `{index['scale']}`, {design_word(design)}: "
          f"{len(page.verdicts)} claims judged on {diverged_text(cells)[:-1]}.", ""]
  headline = [*page.headline, *[line for r in readings for line in (*r.headline, "") if r.headline]]
  head += [*page.opens, *(headline or [answer(page.verdicts, titles), ""])]
  rows = ["| claim (its threshold) | verdict | estimate [95 % CI] |", "|---|---|---|",
          *[f"| {titles.get(v.claim, v.claim)} | {v.verdict} | {estimate_text(v)} |" for v in page.verdicts]]
  figure = [f"![{page.plots[0]}]({page.plots[0]})", ""] if page.plots and page.plots[0] else []
  qualify = [f"- Post-hoc, exploratory ({r.title}): "
             f"{re.split(r'(?<!al)[.;] (?=[A-Z])', next(iter(r.pointers.values())))[0].rstrip('.')}."
             for r in readings if r.pointers]  # its pointer's first sentence
  limits = [f"- {text}" for text in registry.outside(study, "LIMITS")]  # the study's stated ones first
  n = sum(map(cells_lib.diverged, cells))
  if n:
    limits.append(f"- {n} of {len(cells)} models diverged.")
  for word in ("Not powered", "Inconclusive", "Cannot be judged"):
    k = sum(v.verdict == word for v in page.verdicts)
    if k:
      limits.append(f"- {k} claim{'s' * (k != 1)} {word.lower()}.")
  if changed:
    limits.append(f"- {len(changed)} verdict{'s' * (len(changed) != 1)} changed by guards added after the data "
                  f"(exploratory): " + "; ".join(f"{c!r}: {a} -> {b}" for c, a, b in changed) + ".")
  if design_word(design) == "exploratory":
    limits.append("- Exploratory: its verdicts are hypotheses for a confirmatory run, not tests.")
  return [*head, *rows, "", *figure, "## Limitations", "", *(limits or ["- None stated beyond the appendix."]),
          *qualify, ""]


def estimate_text(v) -> str:
  """E.g. ``+0.852 nats [+0.777, +0.927]``, in the claim's unit (``Verdict.unit``)."""
  if v.effect is None:
    return "—"
  estimate = v.estimate().replace("[95 % CI ", "[").split(";")[0]
  return estimate + ("]" if estimate.count("[") > estimate.count("]") else "")


def answer(verdicts: list, titles: dict, most: int = 3) -> str:
  """The abstract's answer: up to ``most`` decided claims (reproduced first), then counts of the rest."""
  order = (claims.REPRODUCED, claims.NOT_REPRODUCED, "Found", "Chosen")
  decided = sorted((v for v in verdicts if v.verdict in order), key=lambda v: order.index(v.verdict))
  said = [f"{titles.get(v.claim, v.claim)}: " + (
      f"{v.verdict.lower()}, {estimate_text(v)}" if v.verdict in order[:2] else
      (v.lines[-1] if v.verdict == "Found" else v.lines[0]).rstrip(".")) for v in decided[:most]]
  counts = collections.Counter(v.verdict.lower() for v in verdicts if v not in decided[:most])
  rest = ", ".join(f"{n} {word}" for word, n in counts.items())
  return "**Answer:** " + "; ".join(said + ([("also " if said else "") + rest] if rest else [])) + " (the table)."


def title_of(question: str, most: int = 298) -> str:
  """The question, or past ``most`` characters its first clause (to the first "?" or ":")."""
  if len(question) <= most:
    return question
  cut = min((i for i in (question.find("?"), question.find(":")) if i > 0), default=-1)
  return question if cut < 0 else question[:cut].rstrip() + "?"


def design_word(design: str) -> str:
  """Exploratory or confirmatory."""
  first = design.strip("*").split(".", 1)[0].split(":", 1)[0].strip("* ").lower()
  return first.split()[0] if first else "design not stated"


# Prose lines longer than this are wrapped.
WIDTH = 280
# Words a wrapped line may not start with (markdown would read a list, heading or quote).
OPENERS = re.compile(r"[-+*]|#+|>.*|\d+[.)]|=+")


def wrapped(lines: list[str]) -> list[str]:
  """Prose lines wrapped at ``WIDTH``; headings, tables, code and figures kept as they are."""
  out, code = [], False
  for line in lines:
    if line.startswith("```"):
      code = not code
    if code or len(line) <= WIDTH or line.startswith(("|", "#", "    ", "![")):
      out.append(line)
      continue
    lead = "> " if line.startswith("> ") else "  " if line.startswith("- ") else ""
    current = ""
    for word in line.split(" "):
      if current and len(current) + 1 + len(word) > WIDTH - len(lead) and not OPENERS.fullmatch(word):
        out.append(current)
        current = lead + word
      else:
        current = f"{current} {word}" if current else word
    out.append(current)
  return out


def shown_path(path: str) -> str:
  """Relative to the repository when inside it, so printed commands run from any checkout."""
  rel = os.path.relpath(os.path.abspath(path), identity.ROOT)
  return path if rel.startswith("..") else rel


# What results.json keeps of sweep.json.
INDEX_KEYS = ("name", "scale", "base_config", "description")
# Digits kept in results.json: past printed figures, short of CPU-dependent ones (same bytes anywhere).
DIGITS = 7


def rounded(x):
  """JSON-ready, recursively: floats rounded to ``DIGITS`` significant digits (NaN and inf kept),
  dataclasses (verdicts, predictions) as dicts."""
  if dataclasses.is_dataclass(x) and not isinstance(x, type):
    return rounded(dataclasses.asdict(x))
  if isinstance(x, float):
    return float(f"{x:.{DIGITS}g}") if math.isfinite(x) else x
  if isinstance(x, dict):
    return {k: rounded(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [rounded(v) for v in x]
  return x


# Verdicts the earlier rules gave the committed cells, kept across a re-expression.
BEFORE = "verdicts_before.json"


def _brief(v) -> dict:
  """A verdict as ``verdicts_before.json`` keeps it: claim, verdict, its effect's diff, lo and hi."""
  effect = None if v.effect is None else {k: getattr(v.effect, k) for k in ("diff", "lo", "hi")}
  return {"claim": v.claim, "verdict": v.verdict, "effect": effect}


def _figures(v) -> tuple:
  """(claim, verdict, effect to 3 decimals) of a verdict or its ``_brief``, across a re-expression."""
  v = v if isinstance(v, dict) else _brief(v)
  e = v["effect"]
  return v["claim"], v["verdict"], None if not e else tuple(round(e[k], 3) for k in ("diff", "lo", "hi"))


def record_verdicts(study: str, index: dict, verdicts: list, where: str) -> str | None:
  """Write ``verdicts_before.json`` once (an existing one is kept), for ``reexpressed`` to check
  later re-expressions of the rules against; returns its path, or None."""
  path = os.path.join(where, BEFORE)
  if os.path.exists(path):
    return None
  body = {"commit": index["rules"].get("commit"), "rules": registry.source(study),
          "verdicts": [_brief(v) for v in verdicts]}
  atomic_write(path, json.dumps(rounded(body), indent=1, allow_nan=True).encode("utf-8"))
  return path


def reexpressed(before: dict | None, verdicts: list, rules_lines: list[str],
                recorded: dict | None = None) -> list[str]:
  """The rules line for a study re-expressed since its run: same verdicts as ``before``, or
  each difference; ``rules_lines`` unchanged without ``before`` or if the rules did not change.
  ``recorded``: the run's rules (sweep.json), to flag rules revised after the data."""
  if not before or "re-judged" not in " ".join(rules_lines):
    return rules_lines
  old, now = [_figures(v) for v in before["verdicts"]], [_figures(v) for v in verdicts]
  where = f"commit {before['commit']}: `git show {before['commit']}:{before['rules']}` has their text"
  run = (recorded or {}).get("commit")
  revised = (f" Those are not the rules the run recorded (commit {run}): they were revised after its data, "
             f"so its verdicts are exploratory." if run and not str(before["commit"]).startswith(run[:7]) else "")
  if old == now:
    return [f"Rules: **re-expressed, same verdicts.** The rules that judged the committed cells "
            f"({where}) are re-expressed on the study framework; on those cells the "
            f"re-expression gives the same {len(now)} verdicts and effects, to the printed "
            f"digits, as they gave ({BEFORE}).{revised}"]
  diffs = [f"{o[0]!r}: {o[1]} {o[2]} before, {n[1]} {n[2]} now" for o, n in zip(old, now) if o != n]
  if len(old) != len(now):
    diffs.append(f"{len(old)} verdicts before, {len(now)} now")
  return rules_lines + [f"Re-expressed since the run ({where}); on the committed cells it differs "
                        f"from the verdicts recorded before ({BEFORE}): " + "; ".join(diffs) + "."]


def rules_line(sweep_dir: str, index: dict, study: str, verdicts: list) -> list[str]:
  """The rules line for the cells in ``sweep_dir`` (see ``identity.rules_lines``, ``reexpressed``)."""
  return reexpressed(read_json(os.path.join(sweep_dir, BEFORE)), verdicts,
                     identity.rules_lines(index.get("rules"), study), index.get("rules"))


def write_results(index: dict, cells: list[dict], page: Page, out: str, command: str = "") -> str:
  """``results.json``: the report's numbers, the cells and ``produced_by``."""
  path = os.path.join(out, "results.json")
  body = rounded({k: index.get(k) for k in INDEX_KEYS} | ({"produced_by": command} if command else {})
                 | page.results | {"cells": cells})
  atomic_write(path, json.dumps(body, indent=1, allow_nan=True).encode("utf-8"))
  return path
