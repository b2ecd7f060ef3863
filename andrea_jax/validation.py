"""The validation loss: the fixed ``EvalSet`` a run is evaluated on and ``evaluate``.

``make_eval_set`` reads ``train.eval_batches`` batches of the validation split once, with
the unigram baseline and the bytes per token that bits per byte reads; ``evaluate``
computes each member's mean loss over them (``loop.train_loop`` every ``train.eval_every``
steps, and ``scoring.evaluate_run`` for a saved checkpoint), and the ``Logger`` writes it
(``logger.py``).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from tqdm.auto import tqdm

from andrea_jax import loader as loader_lib
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import prepared as prepared_lib
from andrea_jax import progress as progress_lib
from andrea_jax import sharding
from andrea_jax import signals as signals_lib
from andrea_jax import step as step_lib
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.members import Models, per_member


@dataclasses.dataclass
class EvalSet:
  """The fixed validation batches and the baselines they are read against."""
  arrays: list  # this process's rows of each batch, as global arrays
  unigram: float  # the unigram baseline's loss on them (nats/token)
  targets: np.ndarray  # the targets evaluated, all processes' rows (for bits per byte)
  token_bytes: np.ndarray  # bytes per token id
  first_batch: np.ndarray  # the diagnostics probe batch

  def bpb(self, val_loss: float | None) -> float | None:
    if val_loss is None:
      return None
    return metrics_lib.bits_per_byte(val_loss, self.targets, self.token_bytes)


def make_eval_set(t: step_lib.TrainConfig, cfg: model.ModelConfig,
                  prepared: prepared_lib.PreparedData, mesh) -> EvalSet:
  """``t.eval_batches`` batches of ``t.batch_size`` rows from the validation shard."""
  train_tokens = prepared.stream("train")
  val_tokens = prepared.stream("val")
  eval_set = loader_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                     name=f"the validation shards in {prepared.directory!r}")
  # Each process holds its own rows of every eval batch, like the loader's train batches.
  local = loader_lib.eval_batches(val_tokens, t.eval_batches, t.batch_size, cfg.block_size,
                                  process_index=jax.process_index(),
                                  process_count=jax.process_count())
  batch = sharding.batch_sharding(mesh, batch_dim=0, ndim=2)
  tok = tokenizer_lib.load(prepared.tokenizer_path, cfg.vocab_size)
  return EvalSet(arrays=[sharding.global_batch(b, batch, batch_dim=0) for b in local],
                 unigram=unigram_loss(train_tokens, eval_set, cfg.vocab_size),
                 targets=eval_set[..., 1:],
                 token_bytes=metrics_lib.token_bytes(tok, cfg.vocab_size),
                 first_batch=eval_set[0])


# The unigram baseline counts at most this many training tokens (the first shard's 100 M
# of a large corpus: its frequencies are those of the whole to well under a per cent).
UNIGRAM_TOKENS = 100_000_000


def unigram_loss(train_tokens, eval_set: np.ndarray, vocab_size: int) -> float:
  """Cross-entropy (nats) of the add-one-smoothed token frequencies of the training split
  (its first ``UNIGRAM_TOKENS``: a start reads a bounded share of a large corpus)."""
  head = np.asarray(train_tokens[:min(UNIGRAM_TOKENS, len(train_tokens))])
  counts = np.bincount(head, minlength=vocab_size).astype(np.float64) + 1.0
  log_p = np.log(counts / counts.sum())
  return float(-log_p[eval_set[..., 1:]].mean())


# Seconds between two lines of an evaluation's progress where stdout is not a terminal.
EVAL_LINE_EVERY_S = 10.0


def evaluate(models: Models, params, eval_set: EvalSet, step: int = 0) -> np.ndarray:
  """Each member's mean validation loss over the fixed batches of ``eval_set``.

  With a bar on a terminal, else a line every ``EVAL_LINE_EVERY_S`` (``progress.Progress``:
  batches done and the time left); a SIGINT is read between batches (``signals.check``
  raises ``signals.Interrupted``): one batch is a single jitted call.
  """
  signals_lib.set_phase(f"evaluating step {step}")
  lead = sharding.is_lead()
  if step == 0 and lead:
    tqdm.write(f"step 0: evaluating on {len(eval_set.arrays)} validation batches")
  losses = []
  with progress_lib.Progress(f"eval step {step}", len(eval_set.arrays), unit="batch",
                             every_s=EVAL_LINE_EVERY_S, show=lead, last_line=False) as bar:
    for b in eval_set.arrays:
      losses.append(per_member(models.eval_loss(params, b)))  # waits for the batch
      signals_lib.check()
      bar.update(1)
  return np.mean(losses, axis=0)
