"""Downstream evaluation: HellaSwag (Zellers et al. 2019), scored as llm.c and lm-eval-harness
score it, for ``python -m experiments.evaluate --task=hellaswag`` and for a run's
``train.task_eval_every``.

The data is HellaSwag's own JSONL (rowanz/hellaswag ``data/hellaswag_val.jsonl``, 10,042
examples): one object a line with ``ctx`` (the context; where it is absent, ``ctx_a + " " +
ctx_b``), ``endings`` (four candidate completions) and ``label`` (the right one, 0-3);
``activity_label`` and the rest are not read. By name (``hellaswag_file``) the validation
set is downloaded once from the URL llm.c uses into ``~/.cache/andrea_jax/hellaswag/``;
offline, one line says so and names ``--task_file``.

Scoring (llm.c's ``dev/data/hellaswag.py``): each ending is tokenized apart from the
context, as ``" " + ending``, and appended to it; the row (context then completion) is
cropped to ``block_size + 1`` tokens from the left, so the model sees at most its context
length. An ending's score is the sum of its tokens' log-likelihoods given all that precedes
them. Two accuracies, the argmax over the four endings of:

* ``acc``: the sum (the completion's total log-likelihood; lm-eval-harness's ``acc``);
* ``acc_norm``: the sum over the completion's length in UTF-8 bytes (of ``" " + ending``):
  lm-eval-harness's ``acc_norm``, which divides by the length of the text. llm.c divides by
  its number of tokens instead; a length in bytes is the same for every tokenizer, so runs
  with different vocabularies are compared on one scale (as ``val_bpb`` does).

Chance is 0.25; OpenAI's GPT-2 small (124M) scores about 0.29 acc and 0.30 acc_norm (the
figures in llm.c's ``dev/data/hellaswag.py``, whose acc_norm is per token).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import urllib.request

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import cross_entropy
from andrea_jax import errors
from andrea_jax import files
from andrea_jax import model
from andrea_jax import signals as signals_lib
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax.model_config import ModelConfig

# The validation split llm.c evaluates (dev/data/hellaswag.py's hellaswags["val"]).
HELLASWAG_URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
# Examples per jitted call (four rows each).
BATCH_EXAMPLES = 16
# Rows are padded to a power of two at least this long (then block_size): few compilations.
MIN_WIDTH = 16


@dataclasses.dataclass(frozen=True)
class Example:
  context: str
  endings: tuple[str, ...]  # four completions
  label: int  # the index of the right one


@dataclasses.dataclass(frozen=True)
class Encoded:
  """Examples as the model reads them: four rows each, a row's completion at its end."""
  rows: list  # [4 N] token ids of context + completion, cropped to block_size + 1 from the left
  scored: np.ndarray  # [N, 4] completion tokens scored (the last ones of each row)
  nbytes: np.ndarray  # [N, 4] UTF-8 bytes of each completion (acc_norm's length)
  labels: np.ndarray  # [N]


# ----------------------------------------------------------------------------- the data


def hellaswag_file(task_file: str = "", cache_dir: str | None = None,
                   name: str = "--task_file") -> str:
  """The HellaSwag JSONL to read: ``task_file`` where given (``name``: the flag or field
  that gave it), else the validation set downloaded once from ``HELLASWAG_URL`` into
  ``<cache_dir>/hellaswag/`` (default ``files.user_cache_dir()``). Offline: one line
  naming ``--task_file``."""
  if task_file:
    files.check_paths(read_files={name: (task_file, f"HellaSwag's JSONL ({HELLASWAG_URL})")},
                      error=errors.DataError)
    return task_file
  path = os.path.join(cache_dir or files.user_cache_dir(), "hellaswag", "hellaswag_val.jsonl")
  if os.path.exists(path):
    return path
  try:
    with urllib.request.urlopen(HELLASWAG_URL, timeout=60) as response:
      data = response.read()
  except OSError as e:  # URLError too: no network, no such host, a refusal
    reason = getattr(e, "reason", e)
    reason = getattr(reason, "strerror", None) or reason  # without its [Errno n]
    raise errors.DataError(
        f"hellaswag: cannot download {HELLASWAG_URL} ({reason}): offline? Download it "
        f"elsewhere and pass it with --task_file=path/to/hellaswag_val.jsonl (in a run: "
        f"--config.train.task_file=...)") from None
  os.makedirs(os.path.dirname(path), exist_ok=True)
  files.atomic_write(path, data)
  print(f"hellaswag: downloaded {HELLASWAG_URL} to {path}", flush=True)
  return path


def read_hellaswag(path: str, limit: int = 0) -> list[Example]:
  """The examples of a HellaSwag JSONL file (the first ``limit``; 0: all); a line that is not
  one is an error naming the file, the line and what it lacks."""
  examples = []
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if limit and len(examples) == limit:
        break
      if line.strip():
        examples.append(_example(line, f"{path}, line {n}"))
  if not examples:
    raise errors.DataError(f"{path} holds no HellaSwag example: pass HellaSwag's JSONL "
                           f"({HELLASWAG_URL})")
  return examples


def _example(line: str, where: str) -> Example:
  try:
    d = json.loads(line)
    context = d["ctx"] if "ctx" in d else f"{d['ctx_a']} {d['ctx_b']}"
    endings, label = tuple(d["endings"]), int(d["label"])
  except (ValueError, KeyError, TypeError) as e:
    raise errors.DataError(f"{where}: not a HellaSwag example ({type(e).__name__}: {e}); "
                           f"expected an object with ctx, endings (4) and label") from None
  if len(endings) != 4 or not 0 <= label < 4:
    raise errors.DataError(f"{where}: expected 4 endings and a label in 0..3, got "
                           f"{len(endings)} endings and label {label}")
  return Example(context, endings, label)


def encode(examples: list[Example], tok, block_size: int) -> Encoded:
  """The four rows of each example (module docstring): context then ``" " + ending``,
  cropped to ``block_size + 1`` tokens from the left."""
  contexts = tokenizer_lib.encode_batch(tok, [e.context for e in examples])
  completions = [" " + ending for e in examples for ending in e.endings]
  ends = tokenizer_lib.encode_batch(tok, completions)
  rows, scored = [], []
  for i, context in enumerate(contexts):
    for end in ends[4 * i:4 * i + 4]:
      row = (context + end)[-(block_size + 1):]
      rows.append(np.asarray(row, np.int32))
      scored.append(min(len(end), len(row) - 1))  # every target of a cropped row at most
  nbytes = [len(c.encode("utf-8")) for c in completions]
  return Encoded(rows, np.reshape(scored, (-1, 4)), np.reshape(nbytes, (-1, 4)),
                 np.array([e.label for e in examples]))


# ----------------------------------------------------------------------------- scoring


@functools.partial(jax.jit, static_argnames="cfg")
def _completion_sums(params, tokens_BT, targets_BT, mask_BT, cfg: ModelConfig):
  """``[B]``: the sum of log p(target) over each row's masked positions."""
  logits_NV = model.forward(params, tokens_BT, cfg).reshape(-1, cfg.padded_vocab)
  _, nll_N = cross_entropy.nll_and_lse(logits_NV, targets_BT.reshape(-1))
  return -jnp.sum(nll_N.reshape(tokens_BT.shape) * mask_BT, axis=1)


def completion_logprobs(params, cfg: ModelConfig, encoded: Encoded,
                        batch_examples: int = BATCH_EXAMPLES) -> np.ndarray:
  """``[N, 4]``: each completion's summed log-likelihood given its context (nats). Rows go
  ``4 x batch_examples`` to a call, padded on the right (causal: what follows a position
  never changes it) to a power of two; a SIGINT is read between calls."""
  rows, scored = encoded.rows, encoded.scored.reshape(-1)
  size = 4 * batch_examples
  sums = []
  for start in range(0, len(rows), size):
    batch = rows[start:start + size]
    longest = max(len(r) for r in batch) - 1
    width = min(max(MIN_WIDTH, 1 << (longest - 1).bit_length()), cfg.block_size)
    tokens, targets, mask = (np.zeros((size, width), dtype) for dtype in
                             (np.int32, np.int32, np.float32))
    for j, row in enumerate(batch):
      n = len(row) - 1
      tokens[j, :n], targets[j, :n] = row[:-1], row[1:]
      mask[j, n - scored[start + j]:n] = 1.0  # the completion: the row's last targets
    sums.append(np.asarray(_completion_sums(params, tokens, targets, mask, cfg))[:len(batch)])
    signals_lib.check()
  return np.concatenate(sums).reshape(-1, 4)


def accuracy(sums: np.ndarray, encoded: Encoded) -> dict:
  """``acc`` and ``acc_norm`` (module docstring) of the ``[N, 4]`` summed log-likelihoods."""
  return {"acc": float(np.mean(np.argmax(sums, axis=1) == encoded.labels)),
          "acc_norm": float(np.mean(np.argmax(sums / encoded.nbytes, axis=1) == encoded.labels)),
          "examples": len(encoded.labels)}


def hellaswag(params, cfg: ModelConfig, encoded: Encoded) -> dict:
  """HellaSwag's ``acc``, ``acc_norm`` and ``examples`` of one model's parameters."""
  return accuracy(completion_logprobs(params, cfg, encoded), encoded)


@dataclasses.dataclass
class Scorer:
  """What a run's loop calls every ``train.task_eval_every`` updates: HellaSwag's scores of
  each member (``stacked``: the parameters carry a leading member axis)."""
  cfg: ModelConfig
  encoded: Encoded

  def __call__(self, params, stacked: bool, n: int) -> list[dict]:
    if not stacked:
      return [hellaswag(params, self.cfg, self.encoded)]
    return [hellaswag(jax.tree.map(lambda a, i=i: a[i], params), self.cfg, self.encoded)
            for i in range(n)]


def describe(scores: dict) -> str:
  """``hellaswag acc 0.2600, acc_norm 0.2700 over 100 examples (chance 0.25)``."""
  return (f"hellaswag acc {scores['acc']:.4f}, acc_norm {scores['acc_norm']:.4f} over "
          f"{scores['examples']} examples (chance 0.25)")
