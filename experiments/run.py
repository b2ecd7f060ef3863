"""Train a named config end to end: ``python -m experiments.run --config=tiny``.

  python -m experiments.run --config=andrea120m --workdir=runs/a120m
  python -m experiments.run --config=tiny:norm=post --config.train.steps=100
  python -m experiments.run --config=path/to/my_config.py

The workdir defaults to ``runs/<config>[_<variants>]`` (``runs/tiny``,
``runs/tiny_norm=post``): rerunning the same command resumes from its latest checkpoint, a
finished run is left as it is ("already complete"), and a resume that changes training
settings is refused unless ``--allow_resume_changes`` (README, Training, "Resume").
Exit codes: 0 completed, 2 user error, 3 diverged, 4 interrupted (SIGTERM/SIGINT; a checkpoint was
saved and the command to resume is printed).
"""

import os
import re
import shlex
import sys

from absl import flags, logging

from andrea_jax import runs
from andrea_jax import sharding
from andrea_jax import train
from experiments import cli

_CONFIG = cli.define_config_flag()
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "run directory (default: runs/<config>[_<variants>])")
_ALLOW_CHANGES = flags.DEFINE_bool(
    "allow_resume_changes", False,
    "resume even though training settings (train.*, seeds, compute dtype) changed; each "
    "segment's config is kept in config_history.json")


def default_workdir(config_arg: str) -> str:
  """``runs/<config>[_<variants>]``: the same command always names the same folder."""
  target, _, variants = config_arg.partition(":")
  name = os.path.basename(target).removesuffix(".py")
  if variants:
    name += "_" + re.sub(r"[^A-Za-z0-9.=+-]+", "_", variants).strip("_")
  return os.path.join("runs", name)


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
  workdir = _WORKDIR.value or default_workdir(flags.FLAGS["config"].serialize().split("=", 1)[-1])
  # Before any other JAX call: the backends must see every process (README, Scaling out).
  sharding.initialize(_CONFIG.value.distributed)
  result = train.train_and_evaluate(_CONFIG.value, workdir, _ALLOW_CHANGES.value)
  if result.summary:
    print(runs.describe(result.summary, workdir))
  if result.status == "interrupted":
    print(f"to resume, run: {resume_command(workdir)}")
  sys.exit(result.exit_code)


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  cli.run(main)
