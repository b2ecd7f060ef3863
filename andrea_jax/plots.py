"""The run's loss curve, ``loss.png``: train and validation loss against the unigram baseline."""

from __future__ import annotations

import os

from andrea_jax import metrics as metrics_lib


def plot_losses(workdir: str, unigram: float | None) -> str:
  """Write ``<workdir>/loss.png`` from ``metrics.jsonl``; returns its path."""
  # A bare Figure, not pyplot: no global backend switch in the caller's notebook.
  from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel
  rows = metrics_lib.read_metrics(workdir)
  fig = Figure(figsize=(7, 4))
  ax = fig.subplots()
  train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
  val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
  if train:
    ax.plot(*zip(*train), label="train", lw=1)
  if val:
    ax.plot(*zip(*val), "o-", label="validation")
  if unigram is not None:
    ax.axhline(unigram, color="gray", ls="--", label=f"unigram baseline ({unigram:.2f})")
  ax.set(xlabel="step", ylabel="cross-entropy (nats/token)", title=os.path.basename(workdir))
  ax.legend()
  fig.tight_layout()
  path = os.path.join(workdir, "loss.png")
  fig.savefig(path, dpi=120)
  return path
