"""Write a sweep's report: ``python -m experiments.report --sweep_dir=docs/results/norm_mlp-cpu``.

The command, and its choice of study: a sweep's report is that of the study that judges it
(``experiments.registry.study_of``: the study sweep.json records, else its name, else the
norm x MLP study), written by the report skeleton (``research/report.py``) with the
study's page (``experiments/studies/<study>/report.py``). Reads the per-cell files a sweep
leaves (``research/cells.py``); writes ``REPORT.md``, ``results.json`` and PNG plots into
``--out`` (default: the sweep directory).
"""

from __future__ import annotations

import os

from absl import flags

from andrea_jax.files import read_json
from experiments import cli
from research import report as reporting
from research import registry

_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None, "directory written by experiments.sweep")
_OUT = flags.DEFINE_string("out", None, "where REPORT.md and plots go (default: sweep_dir)")
_COMMAND = flags.DEFINE_string("command", "", "the command that produced the sweep, for the report")
_COPY = flags.DEFINE_bool("copy_cells", False, "copy the per-cell files into --out first (to "
                          "commit a study: the report is then read from --out alone)")


def write_report(sweep_dir: str, out: str | None = None, command: str = "",
                 copy: bool = False) -> str:
  """REPORT.md, results.json and the plots of a sweep, by the study that judges it."""
  index = read_json(os.path.join(sweep_dir, "sweep.json")) or {}
  return reporting.write_report(registry.study_of(index), sweep_dir, out, command, copy)


def main(argv):
  del argv
  print(write_report(_SWEEP_DIR.value, _OUT.value, _COMMAND.value, _COPY.value))


if __name__ == "__main__":
  flags.mark_flag_as_required("sweep_dir")
  cli.run(main)
