"""Write a sweep's report: ``python -m experiments.report --sweep_dir=results/norm_mlp-cpu --out=docs/studies/norm_mlp-cpu``.

The command, and its choice of study: a sweep's report is that of the study that judges it
(``research.registry.study_of``: the study sweep.json records, else its name, else the
norm x MLP study), written by the report skeleton (``research/report.py``) with the
study's page (``Study.page``, ``experiments/studies/<study>.py``). Reads a study's ``cells.jsonl``
or the per-cell files a sweep leaves (``research/cells.py``); writes ``REPORT.md`` and PNG
plots into ``--out`` (default: the sweep directory) and ``results.json`` beside the data.
To commit a study, pack its cells into ``results/`` and report from there:

  python -m experiments.report --sweep_dir=runs/sweeps/zloss-cpu --pack=results/zloss-cpu \
      --out=docs/studies/zloss-cpu
"""

from __future__ import annotations

import os

from absl import flags

from andrea_jax.files import read_json
from experiments import cli
from research import report as reporting
from research import registry

_SWEEP_DIR = flags.DEFINE_string("sweep_dir", None, "directory written by experiments.sweep, or a "
                                 "study's results/<study>-<scale>")
_OUT = flags.DEFINE_string("out", None, "where REPORT.md and plots go (default: sweep_dir)")
_COMMAND = flags.DEFINE_string("command", "", "the command that produced the sweep, for the report")
_PACK = flags.DEFINE_string("pack", None, "a results directory (results/<study>-<scale>) to pack the "
                            "sweep's cells into first (cells.jsonl, sweep.json): the report is then "
                            "read from it alone, and its results.json written there")


def write_report(sweep_dir: str, out: str | None = None, command: str = "",
                 pack: str | None = None) -> str:
  """REPORT.md, results.json and the plots of a sweep, by the study that judges it."""
  index = read_json(os.path.join(sweep_dir, "sweep.json")) or {}
  return reporting.write_report(registry.study_of(index), sweep_dir, out, command, pack)


def main(argv):
  del argv
  print(write_report(_SWEEP_DIR.value, _OUT.value, _COMMAND.value, _PACK.value))


if __name__ == "__main__":
  flags.mark_flag_as_required("sweep_dir")
  cli.run(main)
