"""Run a sweep: ``python -m experiments.sweep --sweep=norm_mlp --scale=cpu``.

A sweep's cells run as jobs, each in a subprocess: a *group* (cells of one shape that
differ only in learning rate and seed) is one vmapped program of many models
(``andrea_jax/multi.py``, in ``<workdir>/<group>/<member>/``); a cell without a group is an
ordinary ``python -m experiments.run`` in ``<workdir>/<cell>/``. Every cell directory gets a
``cell.json`` (its name, arms, seed and overrides) next to the run's ``summary.json``,
``metrics.jsonl`` and ``diagnostics.jsonl``: what ``experiments.report`` reads. The
machinery is ``research/runner.py``; this is its command, its dry run (``plan_lines``) and the
group's own subprocess (``run_group``).

The sweep is resumable: a job whose cells all say completed or diverged is skipped, an
interrupted one resumes from its checkpoint. Diverged and failed cells are recorded and
the sweep goes on. ``--parallel=N`` runs N jobs at once (on GPUs each worker sees one device).
"""

from __future__ import annotations

import os
import sys

from absl import flags, logging

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import signals as signals_lib
from experiments import cli
from research import checks
from research import cells as cells_lib
from research import pilot
from research import provenance
from research import registry
from research import runner
from research import sweep as sweep_lib

_SWEEP = flags.DEFINE_string("sweep", "norm_mlp", "study in experiments/studies/ (its grid.py)")
_SCALE = flags.DEFINE_string("scale", "cpu", "sweep scale, e.g. cpu or gpu")
_WORKDIR = flags.DEFINE_string("workdir", None, "default: runs/sweeps/<sweep>-<scale>")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "jobs (groups or single cells) run at once",
                                 lower_bound=1)
_ONLY = flags.DEFINE_string("only", "", "run only cells whose path contains this text")
_GPUS = flags.DEFINE_integer("gpus", 0, "GPUs to spread parallel jobs over (0 = no pinning)",
                             lower_bound=0)
_RUN_GROUP = flags.DEFINE_string("run_group", None, "internal: train the group in this directory")
_PILOT = flags.DEFINE_bool("pilot", None, "train the pilot gate (research/pilot.py) before the cells: "
                           "default for a confirmatory study's non-smoke scale, which --nopilot may not skip; "
                           "--pilot asks it of an exploratory study or a smoke scale")
_PILOT_ONLY = flags.DEFINE_bool("pilot_only", False, "train the pilot and stop (its spreads: --dry_run)")
_RESTORE = flags.DEFINE_string("restore", None, "a directory --save wrote (an earlier session's or machine's "
                                "part of this sweep): its finished cells, and its pilot's, are written back into "
                                "the workdir first, so they are not trained again")
_SAVE = flags.DEFINE_string("save", None, "pack the workdir's finished cells (and its pilot's, into <save>/pilot) "
                            "into this directory and stop: what --restore reads in a later session")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "check every cell's config, the claims' parameters "
                             "and a confirmatory study's seeds, print the plan (groups, rates, seeds, "
                             "cost; the study's power plan where it has one) and train nothing")


def check(sweep) -> None:
  """What ``research/checks.py`` checks of a sweep's study before a cell trains: every cell's
  config, its claims' parameters (``registry.study``) and a confirmatory study's seeds."""
  checks.cell_configs(sweep.cells, lambda overrides: registry.group_config(sweep.base_config, overrides))
  if registry.is_file(sweep.judged_by) and not registry.is_smoke(sweep.judged_by, sweep.scale):
    checks.fresh_seeds(registry.study(sweep.judged_by), sweep.scale, registry.used_seeds(sweep.judged_by))
    pilot.check_seeds(registry.study(sweep.judged_by), sweep.scale)


def pilot_wanted(sweep, asked: bool | None) -> bool:
  """Whether the sweep is gated by a pilot: a confirmatory study's non-smoke scale always (``asked``
  False is refused there), any one-file study's when ``asked``."""
  if not registry.is_file(sweep.judged_by):
    if asked:
      raise errors.ConfigError(f"--pilot: {sweep.judged_by!r} is a package's sweep, not a study file; "
                               f"a pilot needs a Study's arms")
    return False
  needed = pilot.needed(registry.study(sweep.judged_by), sweep.scale)
  if needed and asked is False:
    raise errors.ConfigError(f"--nopilot: study {sweep.judged_by!r} is confirmatory, and its pilot gates "
                             f"the {sweep.scale} scale's cells (research/pilot.py): drop --nopilot")
  return needed or bool(asked)


def plan_lines(sweep: sweep_lib.Sweep, workdir: str, gated: bool = False) -> list[str]:
  """What ``--dry_run`` prints: the groups, the code version, the study's power plan, and (``gated``)
  its pilot: which arms passed, and the plan at the pilot's spreads."""
  out = [f"Sweep {sweep.name} at scale {sweep.scale} (judged by {sweep.judged_by}), into {workdir}:",
         "", sweep.description, "", "| group | models | rates | seeds |", "|---|---|---|---|"]
  members: dict[str, list[sweep_lib.Cell]] = {}
  for c in sweep.cells:
    members.setdefault(c.group or c.name, []).append(c)
  for g, cs in members.items():
    rates = sorted({c.learning_rate for c in cs} - {None})  # none: the base config's own
    seeds = sorted({c.seed for c in cs})
    shown = ", ".join(f"{r:g}" for r in rates) or "the config's"
    if cs[0].cooldown_from:  # trained from the stable group's checkpoint (sweep.cooldown_branches)
      g = f"{g} (cooldown off {cs[0].cooldown_from} at step {cs[0].cooldown_step})"
    out.append(f"| {g} | {len(cs)} | {shown} | "
               f"{seeds[0]}..{seeds[-1]} ({len(seeds)}) |")
  code = provenance.code_version()
  out += ["", f"{len(sweep.cells)} models in {len(members)} programs. Code: commit {code['commit']}"
          f" ({'clean tree' if code['clean'] else '**uncommitted changes**: commit before running'}).", ""]
  study = sweep.judged_by  # a package's sweep (no study file) has no power plan
  if not registry.is_file(study):
    return out
  defined = registry.study(study)
  return out + defined.plan_lines(sweep.scale) + pilot.lines(defined, sweep.scale, workdir, gated)


def run_group(directory: str) -> int:
  """Train the members described by ``<directory>/group.json``; 0 when they all finished."""
  from andrea_jax import multi  # pylint: disable=import-outside-toplevel
  spec = files.read_json(os.path.join(directory, "group.json"))
  if spec is None:
    raise errors.ConfigError(f"--run_group={directory!r} holds no group.json: this flag is "
                             f"experiments.sweep's own, for the groups it plans; run the sweep "
                             f"with --sweep=<study> instead")
  config = registry.group_config(spec["base_config"], spec["overrides"])
  members = [multi.Member(**m) for m in spec["members"]]
  with signals_lib.StopSignals():
    try:
      summaries = multi.train_members(config, members, directory)
    except signals_lib.Interrupted as e:  # at a safe point before training: nothing to save
      print(f"{directory}: interrupted while {e.phase}; nothing was trained in this start. Rerun "
            f"the sweep's command to resume.", flush=True)
      return errors.EXIT_INTERRUPTED
  statuses = [s["status"] for s in summaries]
  print(f"{directory}: " + ", ".join(f"{m.name} {s}" for m, s in zip(members, statuses)))
  return errors.EXIT_INTERRUPTED if "interrupted" in statuses else 0


def main(argv):
  del argv
  if _RUN_GROUP.value:
    if not flags.FLAGS["verbosity"].present:
      logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    sys.exit(run_group(_RUN_GROUP.value))
  sweep = registry.load(_SWEEP.value, _SCALE.value)
  workdir = _WORKDIR.value or os.path.join("runs", "sweeps", f"{sweep.name}-{sweep.scale}")
  purpose = "for the sweep's cells (default: runs/sweeps/<sweep>-<scale>)"
  files.check_directory(workdir, "--workdir", purpose)
  check(sweep)  # before any cell trains, dry run or not
  gated = pilot_wanted(sweep, _PILOT.value)
  if _PILOT_ONLY.value and not gated:
    raise errors.ConfigError(f"--pilot_only: {sweep.judged_by} at {sweep.scale} has no pilot; add --pilot")
  parts = [(sweep.cells, workdir, "")]  # (cells, where they train, where their pack goes under --save/--restore)
  if gated:
    parts.append((pilot.sweep(registry.study(sweep.judged_by), sweep.scale).cells, pilot.directory(workdir), "pilot"))
  if _SAVE.value:
    for cells, where, sub in parts:
      if os.path.isdir(where) and cells_lib.read_parts(where):
        n = cells_lib.pack(where, os.path.join(_SAVE.value, sub))
        print(f"saved: {n} cells of {where} into {os.path.join(_SAVE.value, sub, cells_lib.PACKED)}")
    print(f"continue in a later session with: python -m experiments.sweep {' '.join(sys.argv[1:]).replace('--save', '--restore')}")
    return
  if _RESTORE.value:
    held = [p for p in parts if os.path.exists(os.path.join(_RESTORE.value, p[2], cells_lib.PACKED))] or parts[:1]
    for cells, where, sub in held:  # none held: restore says so in one line
      print(f"restored: {cells_lib.restore(os.path.join(_RESTORE.value, sub), where, cells)} finished cells "
            f"into {where}")
  if _DRY_RUN.value:
    print("\n".join(plan_lines(sweep, workdir, gated)))
    return
  if gated:  # before any cell: an arm that does not learn stops the study here, in one line
    only = _ONLY.value if _PILOT_ONLY.value else ""  # a part of the pilot; the gate reads it whole
    found = pilot.run_gate(registry.study(sweep.judged_by), sweep.scale, workdir, _PARALLEL.value, _GPUS.value,
                           only)
    if found is None:
      print(f"pilot: the cells matching --only={only!r} trained in {pilot.directory(workdir)}; the gate "
            f"reads the whole pilot: rerun without --only")
      return
    print(f"pilot passed ({pilot.directory(workdir)}): " + "; ".join(o.text() for o in found))
    if _PILOT_ONLY.value:
      print(f"the pilot's spreads and the plan at them: python -m experiments.sweep {' '.join(sys.argv[1:])} "
            f"--dry_run --nopilot_only")
      return
  files.make_directory(workdir, "--workdir", purpose)
  records = runner.run_sweep(sweep, workdir, _PARALLEL.value, _ONLY.value, _GPUS.value)
  failed = [r["path"] for r in records if r["status"] == "failed"]
  stopped = sum(r["status"] in ("interrupted", runner.NOT_STARTED) for r in records)
  print(f"{len(records)} cells in {workdir}; diverged: "
        f"{sum(r['status'] == 'diverged' for r in records)}; failed: {failed or 'none'}"
        + (f"; interrupted or not started: {stopped}" if stopped else ""))
  if stopped:
    print(f"interrupted: resume with python -m experiments.sweep {' '.join(sys.argv[1:])}")
    sys.exit(errors.EXIT_INTERRUPTED)
  print(f"report: python -m experiments.report --sweep_dir={workdir}")
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  cli.run(main)
