"""Downstream evaluation: HellaSwag (Zellers et al. 2019), scored as lm-eval-harness scores it
(the default) or as llm.c does (by name), for ``python -m experiments.evaluate --task=hellaswag``
and for a run's ``train.task_eval_every``.

The data is HellaSwag's own JSONL (rowanz/hellaswag ``data/hellaswag_val.jsonl``, 10,042
examples): one object a line with ``activity_label``, ``ctx_a``, ``ctx_b``, ``ctx`` (``ctx_a +
" " + ctx_b``), ``endings`` (four candidate completions) and ``label`` (the right one, 0-3). By
name (``hellaswag_file``) the validation set is downloaded once from the URL llm.c uses into
``~/.cache/andrea_jax/hellaswag/``; offline, one line says so and names ``--task_file``.

Every ending is scored as the sum of its tokens' log-likelihoods given the context and the
tokens before it, the row (context then ``" " + ending``) cropped to ``block_size + 1`` tokens
from the left, so the model sees at most its context length (as lm-eval's ``HFLM`` crops,
``lm_eval/models/huggingface.py:1436``; llm.c's rows fit GPT-2's 1,024 uncropped). Each
accuracy is the mean over examples of "the argmax over the four endings of the sum divided by
a length is the label". The two styles (``STYLES``; this module is their one home) differ in
the text, the tokenization and the lengths:

* ``lmeval`` (default; lm-eval-harness v0.4.13, its ``hellaswag`` task): the context is
  ``preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())`` and each choice
  ``preprocess(ending)`` (``lm_eval/tasks/hellaswag/utils.py:6-25``; ``preprocess`` strips,
  turns " [title]" into ". ", removes ``[...]`` and halves double spaces); the continuation is
  ``" " + choice`` (``target_delimiter``'s default ``" "``, ``lm_eval/config/task.py:112``,
  joined in ``lm_eval/api/task.py:1374-1390``); a causal model tokenizes context and
  continuation together and the continuation's tokens are those after the context's
  (``TemplateLM._encode_pair``, ``lm_eval/api/model.py:413-431``). ``acc`` divides by 1,
  ``acc_norm`` by the choice's length in characters and ``acc_bytes`` by its UTF-8 bytes,
  both without the leading space (``lm_eval/api/task.py:1489-1512``): the ``acc_norm`` that
  tables computed with lm-eval-harness report.
* ``llmc`` (llm.c's ``dev/data/hellaswag.py``, its ``render_example`` and ``evaluate``): the
  context is ``ctx`` as it stands (where absent, ``ctx_a + " " + ctx_b``) and each ending is tokenized apart, as ``" " + ending``, and
  appended; ``acc`` divides by 1 and ``acc_norm`` by the ending's number of tokens (its mean
  loss), so it depends on the tokenizer.

Chance is 0.25; OpenAI's GPT-2 small (124M) scores 0.2892 acc and 0.3114 acc_norm with
lm-eval-harness, 0.2859 acc and 0.2955 acc_norm with llm.c (the figures in the docstring of
llm.c's ``dev/data/hellaswag.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
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


# The scoring styles (module docstring): lm-eval-harness's (the default) and llm.c's.
STYLES = ("lmeval", "llmc")
# The accuracies each style reports, in the order they are printed.
METRICS = {"lmeval": ("acc", "acc_norm", "acc_bytes"), "llmc": ("acc", "acc_norm")}


@dataclasses.dataclass(frozen=True)
class Example:
  context: str  # as the style builds it (module docstring)
  endings: tuple[str, ...]  # the four choices, without the " " that joins them to the context
  label: int  # the index of the right one


@dataclasses.dataclass(frozen=True)
class Encoded:
  """Examples as the model reads them: four rows each, a row's completion at its end."""
  rows: list  # [4 N] token ids of context + completion, cropped to block_size + 1 from the left
  scored: np.ndarray  # [N, 4] completion tokens scored (the last ones of each row)
  lengths: dict  # metric -> [N, 4] what each completion's sum is divided by (module docstring)
  labels: np.ndarray  # [N]
  style: str


def check_style(style: str, name: str = "--task_style") -> str:
  if style not in STYLES:
    raise errors.ConfigError(f"{name}={style!r}: expected one of {STYLES} (lmeval: "
                             f"lm-eval-harness's HellaSwag, llmc: llm.c's)")
  return style


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


def read_hellaswag(path: str, limit: int = 0, style: str = "lmeval") -> list[Example]:
  """The examples of a HellaSwag JSONL file (the first ``limit``; 0: all), their contexts and
  choices as ``style`` builds them; a line that is not one is an error naming the file, the
  line and what it lacks."""
  check_style(style)
  examples = []
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if limit and len(examples) == limit:
        break
      if line.strip():
        examples.append(_example(line, f"{path}, line {n}", style))
  if not examples:
    raise errors.DataError(f"{path} holds no HellaSwag example: pass HellaSwag's JSONL "
                           f"({HELLASWAG_URL})")
  return examples


def preprocess(text: str) -> str:
  """lm-eval-harness's HellaSwag text cleaning (``lm_eval/tasks/hellaswag/utils.py:6-12``):
  WikiHow's bracketed artifacts out, " [title]" as a sentence break."""
  text = text.strip().replace(" [title]", ". ")
  return re.sub(r"\[.*?\]", "", text).replace("  ", " ")


def _example(line: str, where: str, style: str) -> Example:
  fields = ("activity_label, ctx_a, ctx_b" if style == "lmeval" else "ctx (or ctx_a and ctx_b)")
  try:
    d = json.loads(line)
    if style == "lmeval":  # lm_eval/tasks/hellaswag/utils.py:15-25 (process_docs)
      context = preprocess(d["activity_label"] + ": " + d["ctx_a"] + " " + d["ctx_b"].capitalize())
      endings = tuple(preprocess(e) for e in d["endings"])
    else:  # llm.c's render_example
      context = d["ctx"] if "ctx" in d else f"{d['ctx_a']} {d['ctx_b']}"
      endings = tuple(d["endings"])
    label = int(d["label"])
  except (ValueError, KeyError, TypeError, AttributeError) as e:
    lacks = ("; a file with ctx alone is scored as llm.c scores it with --task_style=llmc"
             if style == "lmeval" and isinstance(e, KeyError) else "")
    raise errors.DataError(f"{where}: not a HellaSwag example ({type(e).__name__}: {e}); "
                           f"expected an object with {fields}, endings (4) and label{lacks}"
                           ) from None
  if len(endings) != 4 or not 0 <= label < 4:
    raise errors.DataError(f"{where}: expected 4 endings and a label in 0..3, got "
                           f"{len(endings)} endings and label {label}")
  return Example(context, endings, label)


def _tokenize(examples: list[Example], tok, style: str) -> tuple[list, list]:
  """Each example's context tokens and its four completions' tokens (module docstring)."""
  contexts = tokenizer_lib.encode_batch(tok, [e.context for e in examples])
  if style == "llmc":  # " " + ending on its own, appended
    return contexts, tokenizer_lib.encode_batch(
        tok, [" " + ending for e in examples for ending in e.endings])
  # lm-eval's TemplateLM._encode_pair (lm_eval/api/model.py:413-431): the context's trailing
  # spaces move to the continuation; context + continuation is tokenized whole and the
  # continuation is what follows the context's own tokens.
  pairs = []
  for e in examples:
    context = e.context.rstrip()
    spaces = e.context[len(context):]
    pairs.append((context, [spaces + " " + ending for ending in e.endings]))
  contexts = tokenizer_lib.encode_batch(tok, [c for c, _ in pairs])
  wholes = tokenizer_lib.encode_batch(tok, [c + end for c, ends in pairs for end in ends])
  return contexts, [whole[len(contexts[i // 4]):] for i, whole in enumerate(wholes)]


def encode(examples: list[Example], tok, block_size: int, style: str = "lmeval") -> Encoded:
  """The four rows of each example (module docstring): context then completion, cropped to
  ``block_size + 1`` tokens from the left, and the lengths ``style``'s accuracies divide by."""
  contexts, ends = _tokenize(examples, tok, check_style(style))
  rows, scored = [], []
  for i, context in enumerate(contexts):
    for end in ends[4 * i:4 * i + 4]:
      row = (context + end)[-(block_size + 1):]
      rows.append(np.asarray(row, np.int32))
      scored.append(min(len(end), len(row) - 1))  # every target of a cropped row at most
  scored = np.reshape(scored, (-1, 4))
  choices = [ending for e in examples for ending in e.endings]
  if style == "lmeval":  # lm_eval/api/task.py:1494-1495: the choice, without the delimiter
    lengths = {"acc_norm": np.reshape([float(len(c)) for c in choices], (-1, 4)),
               "acc_bytes": np.reshape([float(len(c.encode("utf-8"))) for c in choices], (-1, 4))}
  else:  # llm.c: sum_loss / shift_mask.sum(dim=1), the completion's tokens
    lengths = {"acc_norm": scored.astype(np.float64)}
  return Encoded(rows, scored, {"acc": np.ones(scored.shape), **lengths},
                 np.array([e.label for e in examples]), style)


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
  """The style's accuracies (``METRICS``; module docstring) of the ``[N, 4]`` summed
  log-likelihoods, with ``examples`` and ``style``. A tie goes to the first ending, as
  ``np.argmax`` gives it in both references."""
  sums = np.asarray(sums, np.float64)
  return {**{name: float(np.mean(np.argmax(sums / encoded.lengths[name], axis=1) == encoded.labels))
             for name in METRICS[encoded.style]},
          "examples": len(encoded.labels), "style": encoded.style}


def hellaswag(params, cfg: ModelConfig, encoded: Encoded) -> dict:
  """HellaSwag's accuracies (``accuracy``) of one model's parameters."""
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
  """``hellaswag (lmeval) acc 0.2600, acc_norm 0.2700, acc_bytes 0.2700 over 100 examples
  (chance 0.25)``."""
  figures = ", ".join(f"{name} {scores[name]:.4f}" for name in METRICS[scores["style"]])
  return (f"hellaswag ({scores['style']}) {figures} over {scores['examples']} examples "
          f"(chance 0.25)")
