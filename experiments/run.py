"""Train a named config end to end: ``python -m experiments.run --config=tiny``.

  python -m experiments.run --config=andrea120m --workdir=runs/a120m
  python -m experiments.run --config=tiny:norm=post --config.train.steps=100
  python -m experiments.run --config=path/to/my_config.py
  python -m experiments.run --config=tiny --config.train.schedule=wsd --workdir=runs/long
  python -m experiments.run --config=tiny --config.train.schedule=wsd --cooldown_from=runs/long \
      --cooldown_steps=30 --cooldown_step=100 --workdir=runs/long_at130

The workdir defaults to ``runs/<config>[_<variants>]`` (``runs/tiny``,
``runs/tiny_norm=post``, ``runs/tiny_data=my_texts`` for ``--config.data.path=my_texts/``;
``default_workdir``): rerunning the same command resumes from its latest checkpoint, a
finished run is left as it is ("already complete"), and a resume that changes training
settings is refused unless ``--allow_resume_changes`` (docs/training.md, "Resume").
``--cooldown_from=<run> --cooldown_steps=N`` branches a decay of N updates off a checkpoint
of a run into a new workdir (``workdir.branch_cooldown``; docs/training.md, "Cooldown").
Exit codes: 0 completed, 2 user error, 3 diverged, 4 interrupted (SIGTERM/SIGINT; a checkpoint was
saved and the command to resume is printed).
"""

import os
import re
import shlex
import sys

from absl import flags, logging

from andrea_jax import signals as signals_lib

if __name__ == "__main__":  # a Ctrl-C while the libraries load is a stop request too
  _EARLY_STOP = signals_lib.StopSignals().__enter__()  # pylint: disable=unnecessary-dunder-call

import jax  # pylint: disable=wrong-import-position

from andrea_jax import config as config_lib
from andrea_jax import configdict
from andrea_jax import corpus
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import forecast
from andrea_jax import run_record
from andrea_jax import sharding
from andrea_jax import train
from andrea_jax import workdir as workdir_lib
from experiments import cli

_CONFIG = cli.define_config_flag()
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "run directory (default: runs/<config>[_<variants>])")
_COOLDOWN_FROM = flags.DEFINE_string(
    "cooldown_from", None,
    "a run's workdir to branch a cooldown from (its newest checkpoint, or --cooldown_step): "
    "its schedule up to there, then train.decay_shape's decay over --cooldown_steps, in a "
    "new --workdir (default: <run>_cooldown<step>+<steps>); the run itself is only read")
_COOLDOWN_STEPS = flags.DEFINE_integer("cooldown_steps", None,
                                       "updates of the cooldown's decay (with --cooldown_from)")
_COOLDOWN_STEP = flags.DEFINE_integer("cooldown_step", None,
                                      "the checkpoint step to cool down from (default: the newest)")
_ALLOW_CHANGES = flags.DEFINE_bool(
    "allow_resume_changes", False,
    "resume even though training settings (train.*, seeds, compute dtype) changed; each "
    "segment's config is kept in config_history.json")


# A run's length: raising it continues the same run (``--allow_resume_changes``), in its folder.
BUDGET_FIELDS = {"train.steps"}


def default_workdir(config_arg: str, overridden: dict | None = None) -> str:
  """``runs/<config>[_<variants>][_<what else differs>]``: one command, one folder.

  Besides the variants, the name holds every override that changes what is trained: the
  model and data fields a resume may never change (``--config.data.path=my_texts/`` gives
  ``runs/tiny_data=my_texts``) and the training ones (``--config.train.optimizer=muon``
  gives ``runs/tiny_optimizer=muon``), so two runs that differ only in those do not share
  a folder. ``train.steps`` (``BUDGET_FIELDS``) and the settings a resume may always change
  (logging, checkpoints, caches: ``workdir.field_kind`` "free") leave it as it is: raising
  ``train.steps`` with ``--allow_resume_changes`` names the same folder.
  """
  target, _, variants = config_arg.partition(":")
  parts = [os.path.basename(target).removesuffix(".py"), variants]
  named = {k if "." in k else f"model.{k}" for k in configdict.parse_variants(variants)}
  for field, value in (overridden or {}).items():
    kind = workdir_lib.field_kind(field)
    if (kind == "frozen" or kind == "trajectory" and field not in BUDGET_FIELDS) and field not in named:
      value = os.path.basename(str(value).rstrip("/")) if field.endswith("path") else value
      parts.append(f"{'data' if field == 'data.path' else field.split('.')[-1]}={value}")
  name = "_".join(p for p in parts if p)
  return os.path.join("runs", re.sub(r"[^A-Za-z0-9.=+-]+", "_", name).strip("_"))


def check_cooldown_flags() -> None:
  if _COOLDOWN_FROM.value and _COOLDOWN_STEPS.value is None:
    cli.fail("--cooldown_from needs --cooldown_steps: the updates of its decay")
  if not _COOLDOWN_FROM.value and (_COOLDOWN_STEPS.value, _COOLDOWN_STEP.value) != (None, None):
    cli.fail("--cooldown_steps and --cooldown_step need --cooldown_from: the run to branch from")


def check_cooldown_source() -> None:
  """``--cooldown_from`` a folder that is not a run: one line before any work (the data
  preparation before the branch can take hours)."""
  if _COOLDOWN_FROM.value:
    try:
      run_record.saved_config(_COOLDOWN_FROM.value)
    except errors.AndreaError as e:
      cli.fail(f"--cooldown_from={_COOLDOWN_FROM.value!r}: {e}")


def cooldown_workdir() -> str:
  """``<run>_cooldown<step>+<steps>``: one folder per budget branched off a run."""
  step = workdir_lib.cooldown_step(_COOLDOWN_FROM.value, _COOLDOWN_STEP.value)
  return f"{_COOLDOWN_FROM.value.rstrip('/')}_cooldown{step}+{_COOLDOWN_STEPS.value}"


def resume_command(workdir: str) -> str:
  """The command line of this run, with its workdir spelt out."""
  args, skip = [], False
  for a in sys.argv[1:]:
    if not skip and not a.startswith("--workdir="):
      skip = a == "--workdir"  # its value is the next argument
      args += [] if skip else [a]
    else:
      skip = False
  return shlex.join(["python", "-m", "experiments.run", *args, f"--workdir={workdir}"])


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  check_cooldown_flags()
  check_cooldown_source()
  config, overridden = _CONFIG.value, cli.overridden_fields()
  corpus.sniff(config_lib.data_config(config))  # a corpus in a wrong format: before all else
  config_arg = flags.FLAGS["config"].serialize().split("=", 1)[-1]
  workdir = _WORKDIR.value or (cooldown_workdir() if _COOLDOWN_FROM.value else
                               default_workdir(config_arg, overridden))
  files.check_paths(write_dirs={  # before anything is printed or compiled
      "--workdir": (workdir, "for the run (a new one, or a run's workdir)"),
      "data.cache_dir": (config.data.cache_dir,
                         "for the prepared data (--config.data.cache_dir=...)")},
      read_files={"train.task_file": (
          config.train.task_file or None,
          "HellaSwag's JSONL (hellaswag_val.jsonl), or '' to download it")})
  # One handler for every phase, data preparation included (andrea_jax/signals.py).
  with signals_lib.StopSignals() as stop:
    stop.resume = resume_command(workdir)
    try:
      result = _train(config, overridden, config_arg, workdir)
    except signals_lib.Interrupted as e:
      print(f"interrupted while {e.phase}: nothing was trained in this start" + (
          f"; {e.kept}" if e.kept else ", so nothing was saved"), flush=True)
      print(f"to resume, run: {stop.resume}", flush=True)
      sys.exit(train.EXIT_INTERRUPTED)
  if result.summary:
    print(workdir_lib.describe(result.summary, workdir))
  if result.status == "interrupted":
    print(f"to resume, run: {resume_command(workdir)}")
  sys.exit(result.exit_code)


def _train(config, overridden: dict, config_arg: str, workdir: str):
  # Before any other JAX call: the backends must see every process (docs/scaling.md).
  sharding.initialize(config_lib.DistributedConfig(**config.distributed))
  name = os.path.basename(config_arg.partition(":")[0]).removesuffix(".py")
  note = forecast.gpu_config_note(name, jax.default_backend())
  if note and sharding.is_lead():
    print(f"note: {note}", flush=True)
  signals_lib.set_phase("preparing data")
  source = _COOLDOWN_FROM.value
  for note in cli.fit_to_data(config, overridden, source or workdir):  # a source: read only
    print(f"note: {note}", flush=True)
  if source:
    config = _cooldown(config_lib.RunConfig.from_configdict(config), source, workdir)
  return train.train_and_evaluate(config, workdir, _ALLOW_CHANGES.value)


def _cooldown(config, source: str, workdir: str):
  """The cooldown's config, its workdir branched off ``source`` (``workdir.branch_cooldown``)."""
  branch = lambda: workdir_lib.branch_cooldown(source, workdir, config, _COOLDOWN_STEPS.value,
                                               _COOLDOWN_STEP.value, _ALLOW_CHANGES.value)
  if sharding.is_lead():  # process 0 makes the branch; the others then find it made
    cooled = branch()
  sharding.barrier("andrea_jax: cooldown branched")
  if not sharding.is_lead():
    return branch()
  t = cooled.train
  print(f"cooldown of {source} in {workdir}: from step {t.steps - _COOLDOWN_STEPS.value}, a "
        f"{t.decay_shape} decay to {t.min_lr_ratio:g} of the peak over {_COOLDOWN_STEPS.value} "
        f"steps (its history: {workdir}/config_history.json)", flush=True)
  return cooled


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  cli.run(main)
