"""The README's training commands, run as a newcomer runs them, with what they print and take.

  python -m benchmarks.quickstart                       # writes results/benchmarks/quickstart.json
  python -m benchmarks.quickstart --out=/tmp/qs.json    # anywhere else

Runs the quick start (``python -m experiments.run --config=tiny``) and the README's
variant of it one after the other in a fresh, empty directory, so the quick start finds a
cold data cache (corpus reading, tokenizer training and token shards are in its time) and
the variant reuses it. Stdout is a pipe, as in a log. Records per command its wall time,
the 1-minute load average before and after, everything it printed and its
``summary.json``, with the machine. The README's quick-start figures and printed lines
are copied from this file; rerun it on an idle machine to refresh them.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from andrea_jax import workdir as workdir_lib
from benchmarks import results as results_lib
from experiments import run as run_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
# The README's commands, in its order: the quick start, then the variant it discusses.
COMMANDS = ("python -m experiments.run --config=tiny",
            "python -m experiments.run --config=tiny:norm=post --config.train.steps=100")


def run_command(command: str, cwd: str) -> dict:
  """One README command in ``cwd``: its output, wall time, load and summary."""
  args = shlex.split(command)
  env = {**os.environ, "PYTHONPATH": str(REPO)}
  load_before, start = os.getloadavg()[0], time.perf_counter()
  done = subprocess.run([sys.executable, *args[1:]], cwd=cwd, env=env, text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
  wall = time.perf_counter() - start
  if done.returncode:
    raise SystemExit(f"error: {command} exited with {done.returncode}:\n{done.stdout}")
  (config,) = [a.removeprefix("--config=") for a in args if a.startswith("--config=")]
  workdir = run_lib.default_workdir(config)  # train overrides do not change the name
  summary = workdir_lib.read_summary(os.path.join(cwd, workdir))
  return {"command": command, "load_before": load_before, "load_after": os.getloadavg()[0],
          "wall_s": wall, "output": done.stdout, "summary": summary}


def define_flags(fv: flags.FlagValues = flags.FLAGS) -> None:
  """The command's flag: defined when it runs, so importing the module defines none."""
  flags.DEFINE_string("out", str(REPO / "results" / "benchmarks" / "quickstart.json"),
                      "where the JSON goes (written after each command)", flag_values=fv)


def main(argv: list[str], fv: flags.FlagValues = flags.FLAGS) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}; every setting is a --flag")
  result = {"machine": results_lib.machine(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
  with tempfile.TemporaryDirectory() as tmp:
    result["runs"] = []
    for command in COMMANDS:
      result["runs"].append(run_command(command, tmp))
      done = result["runs"][-1]
      with open(fv.out, "w", encoding="utf-8") as f:  # after each command: a long job
        json.dump(result, f, indent=2)
      print(f"{command}: {done['wall_s']:.0f} s (load {done['load_before']:.2f} -> "
            f"{done['load_after']:.2f}); wrote {fv.out}", flush=True)


if __name__ == "__main__":
  define_flags()
  from experiments import cli  # pylint: disable=ungrouped-imports
  cli.run(main)
