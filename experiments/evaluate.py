"""Score a saved checkpoint without training (nanoGPT's ``eval_only``): the validation loss
(nats per token), bits per byte and the unigram baseline, as the run's own evaluations; or,
with ``--task=hellaswag``, HellaSwag's accuracies (``andrea_jax/tasks.py``).

  python -m experiments.evaluate --workdir=runs/tiny                 # the newest checkpoint
  python -m experiments.evaluate --workdir=runs/tiny --step=200 --eval_batches=100
  python -m experiments.evaluate --workdir=runs/tiny --data=runs/cache/<key> --out=eval.json
  python -m experiments.evaluate --workdir=runs/tiny --task=hellaswag --task_examples=500
  python -m experiments.evaluate --workdir=runs/tiny --task=hellaswag --task_file=hellaswag_val.jsonl
  python -m experiments.evaluate --workdir=runs/tiny --task=hellaswag --task_style=llmc  # llm.c's numbers

``--task=hellaswag`` downloads HellaSwag's validation set once into ``~/.cache/andrea_jax``
(offline: one line; pass a copy with ``--task_file``) and prints, as lm-eval-harness scores
it, ``acc`` (the ending of the highest summed log-likelihood), ``acc_norm`` (per character of
the ending) and ``acc_bytes`` (per UTF-8 byte), over 0.25 chance; ``--task_style=llmc``
scores it as llm.c does (``acc_norm`` per token; ``andrea_jax/tasks.py``).

By default the batches are the run's own validation set, the same fixed batches its
evaluations used (so the newest checkpoint of a finished run scores its final
``val_loss``). ``--data`` scores the validation split of other prepared data instead: a
directory ``python -m experiments.prepare`` prints, or another run's workdir (the data it
trained on). It must be tokenized with this run's tokenizer (other token ids would be other
text to the model): another tokenizer is refused, with the command that prepares the text
with this run's. Nothing is written into the workdir; ``--out`` writes the numbers as JSON.
"""

from __future__ import annotations

import os
import sys

from absl import flags, logging

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import signals as signals_lib
from andrea_jax import tasks
from andrea_jax import scoring
from experiments import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "run directory written by experiments.run")
_STEP = flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)")
_DATA = flags.DEFINE_string("data", None, "prepared data directory or another run's workdir "
                            "(default: the run's own validation set)")
_EVAL_BATCHES = flags.DEFINE_integer("eval_batches", None,
                                     "validation batches (default: the run's train.eval_batches)",
                                     lower_bound=1)
_OUT = flags.DEFINE_string("out", None, "also write the numbers to this JSON file")
_TASK = flags.DEFINE_enum("task", "val_loss", ["val_loss", "hellaswag"],
                          "what to score: the validation loss, or HellaSwag's accuracies")
_TASK_FILE = flags.DEFINE_string("task_file", None, "HellaSwag's JSONL (default: its validation "
                                 "set, downloaded once into ~/.cache/andrea_jax)")
_TASK_EXAMPLES = flags.DEFINE_integer("task_examples", 0, "score the first this many HellaSwag "
                                      "examples (0: all)", lower_bound=0)
_TASK_STYLE = flags.DEFINE_enum("task_style", "lmeval", list(tasks.STYLES),
                                "how HellaSwag is scored: lm-eval-harness's way (acc, acc_norm per "
                                "character, acc_bytes) or llm.c's (acc_norm per token)")


def describe(result: dict) -> str:
  """What an evaluation found, in two lines."""
  own = "the run's validation set" if _DATA.value is None else "the validation split"
  return (f"{result['workdir']} at step {result['step']} on {own} in {result['data']}: "
          f"{result['eval_batches']} batches of {result['batch_size']} x "
          f"{result['block_size']} tokens\n"
          f"val_loss {result['val_loss']:.4f} nats/token, {result['val_bpb']:.4f} bits/byte "
          f"(unigram {result['unigram_val_loss']:.4f})")


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  hellaswag = _TASK.value == "hellaswag"
  if not hellaswag and (_TASK_FILE.value is not None or _TASK_EXAMPLES.value
                        or _TASK_STYLE.present):
    raise errors.ConfigError(
        "--task_file, --task_examples and --task_style are HellaSwag's: add --task=hellaswag")
  if hellaswag and (_DATA.value is not None or _EVAL_BATCHES.value is not None):
    raise errors.ConfigError("--data and --eval_batches are the validation loss's: "
                             "--task=hellaswag reads --task_file (or downloads HellaSwag)")
  files.check_paths(  # before anything is printed or read
      write_files={"--out": (_OUT.value, "for the JSON")},
      read_dirs={"--data": (_DATA.value, "a prepared data directory or another run's workdir")},
      read_files={"--task_file": (_TASK_FILE.value, "HellaSwag's JSONL (hellaswag_val.jsonl)")})
  # Downloaded (or found) first: offline, one line before any checkpoint is read.
  task_file = tasks.hellaswag_file(_TASK_FILE.value or "") if hellaswag else None
  with signals_lib.StopSignals() as stop:
    stop.resume = "the same command again"
    try:
      result = (scoring.evaluate_task(_WORKDIR.value, task_file, _STEP.value, _TASK_EXAMPLES.value,
                                      _TASK_STYLE.value)
                if hellaswag else
                scoring.evaluate_run(_WORKDIR.value, _STEP.value, _DATA.value, _EVAL_BATCHES.value))
    except signals_lib.Interrupted as e:
      print(f"interrupted while {e.phase}: nothing was written", flush=True)
      sys.exit(errors.EXIT_INTERRUPTED)
  print(f"{result['workdir']} at step {result['step']}: {tasks.describe(result)}" if hellaswag
        else describe(result))
  if _OUT.value:
    os.makedirs(os.path.dirname(os.path.abspath(_OUT.value)), exist_ok=True)
    files.write_json(_OUT.value, result)
    print(f"wrote {_OUT.value}")


if __name__ == "__main__":
  flags.mark_flag_as_required("workdir")
  cli.run(main)
