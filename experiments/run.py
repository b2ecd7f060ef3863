"""Train a named config end to end: ``python -m experiments.run --config=tiny``.

  python -m experiments.run --config=andrea120m --workdir=runs/a120m
  python -m experiments.run --config=tiny:norm=post --config.train.steps=100
  python -m experiments.run --config=path/to/my_config.py

Rerunning with the same --workdir resumes from its latest checkpoint. Exit codes:
0 completed, 3 diverged, 4 interrupted (SIGTERM/SIGINT; a checkpoint was saved).
"""

import os
import sys
import time

from absl import flags, logging

from andrea_jax import sharding
from andrea_jax import train
from experiments import cli

_CONFIG = cli.define_config_flag()
_WORKDIR = flags.DEFINE_string("workdir", None, "run directory (default: a new folder under runs/)")


def default_workdir(config_arg: str) -> str:
  name = os.path.basename(config_arg).removesuffix(".py").replace(":", "_").replace(",", "_")
  return os.path.join("runs", f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  workdir = _WORKDIR.value or default_workdir(flags.FLAGS["config"].serialize().split("=", 1)[-1])
  # Before any other JAX call: the backends must see every process (README, Scaling out).
  sharding.initialize(_CONFIG.value.distributed)
  result = train.train_and_evaluate(_CONFIG.value, workdir)
  s = result.summary
  print(f"{result.status}: {s['steps']} steps in {s['wall_time_s']:.0f} s; "
        f"val loss {s['final_val_loss']}, unigram baseline {s['unigram_val_loss']:.4f}; "
        f"workdir {workdir}")
  sys.exit(result.exit_code)


if __name__ == "__main__":
  flags.mark_flag_as_required("config")
  cli.run(main)
