"""A run's record in its workdir: the config in force and its segments
(``config_history.json``), the data it trained on (``data.json``), its wall time over all
segments (``Clock``), and its summary (``summary.json`` written and read, and what a run's
end prints).

``resume.py`` writes the config, the segments and ``data.json`` when a run starts; this
module reads them back.
"""

from __future__ import annotations

import os
import time

from andrea_jax import errors
from andrea_jax import files
from andrea_jax import metrics

# What to do about a workdir file that is not valid JSON.
_FIX = "restore it or use a fresh --workdir"


def _read(workdir: str, name: str):
  return files.read_json(os.path.join(workdir, name), _FIX, errors.CheckpointError)


def load_config_dict(workdir: str) -> dict | None:
  """The config in force (``config.json``), or None in a fresh workdir."""
  return _read(workdir, "config.json")


def config_history(workdir: str) -> list[dict] | None:
  """The segments of a resumed-with-changes run: ``[{start_step, changes, config}, ...]``."""
  return _read(workdir, "config_history.json")


def config_segments(workdir: str) -> list[dict]:
  """``[{start_step, changes}]`` for the summary: one segment unless a resume changed settings."""
  history = config_history(workdir) or [{"start_step": 0, "changes": []}]
  return [{"start_step": s["start_step"], "changes": s["changes"]} for s in history]


def read_data(workdir: str) -> dict | None:
  """What the run trained on (``data.json``: its tokenizer, shards and their sizes)."""
  return _read(workdir, "data.json")


def read_summary(workdir: str) -> dict | None:
  return _read(workdir, "summary.json")


def write_summary(workdir: str, summary: dict) -> None:
  files.write_json(os.path.join(workdir, "summary.json"), summary)


class Clock:
  """A run's wall time over all its segments: what earlier segments recorded (their
  summaries and metrics rows, the newest of them) plus this segment's, from its start."""

  def __init__(self, workdir: str, dirs=(), start: float | None = None):
    earlier = [0.0]
    for d in (workdir, *dirs):
      rows = [read_summary(d) or {}, *metrics.read_metrics(d)]
      earlier += [r["wall_time_s"] for r in rows if r.get("wall_time_s") is not None]
    self.earlier, self.start = max(earlier), time.time() if start is None else start

  def seconds(self) -> float:
    return self.earlier + time.time() - self.start



def describe(summary: dict, workdir: str) -> str:
  """What a run's end prints: the outcome, the losses and what they mean, where files are."""
  s = summary
  lines = [f"{s['status']}: {s['steps']} steps, {s['wall_time_s']:.0f} s; workdir {workdir}"]
  val, uni = s.get("final_val_loss"), s.get("unigram_val_loss")
  if val is not None and uni is not None:
    bpb = f" = {s['val_bpb']:.3f} bits/byte" if s.get("val_bpb") is not None else ""
    verdict = (f"{uni - val:.3f} nats/token better than token frequencies alone"
               if val < uni else "no better than token frequencies alone: nothing learned "
               "beyond them yet")
    lines.append(f"validation loss {val:.3f} nats/token{bpb}; unigram baseline {uni:.3f} "
                 f"(the loss of predicting each token from its training frequency): {verdict}."
                 f" Lower is better.")
  for name, what in (("summary.json", "summary"), ("loss.png", "loss curve"),
                     ("samples.txt", "samples"), ("metrics.jsonl", "metrics")):
    if os.path.exists(os.path.join(workdir, name)):
      lines.append(f"  {what}: {os.path.join(workdir, name)}")
  return "\n".join(lines)

