"""HellaSwag scored by lm-eval-harness itself and by ``tasks.py``: the same accuracies.

lm-eval (``pip install -r requirements-interop.txt``; skipped with that reason without it)
runs its own ``hellaswag`` task, the packaged ``hellaswag.yaml`` with its ``process_docs`` and
``preprocess``, on a local file, through its own evaluator and metrics; only the model is
ours: a ``TemplateLM`` adapter whose ``_loglikelihood_tokens`` runs ``model.forward`` one
row at a time on a tiny random model with a tokenizer of ours, cropped as lm-eval's
``HFLM`` crops (``lm_eval/models/huggingface.py:1436``). ``tasks.py`` scores the same file in
its default style, as ``python -m experiments.evaluate --task=hellaswag`` does
(``scoring.evaluate_task`` past the checkpoint: ``tasks.hellaswag``). Importing lm_eval takes
about 3 s, so the comparison is one module.
"""

import functools
import json
import os

import jax
import numpy as np
import pytest

from andrea_jax import model
from andrea_jax import tasks
from andrea_jax import tokenizer as tokenizer_lib

lm_eval = pytest.importorskip("lm_eval", reason="the parity test needs lm-eval "
                              "(pip install -r requirements-interop.txt)")
from lm_eval import evaluator  # noqa: E402  (after the skip)
from lm_eval.api.model import TemplateLM  # noqa: E402
from lm_eval.api.task import ConfigurableTask  # noqa: E402
from lm_eval.tasks._yaml_loader import load_yaml  # noqa: E402
from lm_eval.tasks.hellaswag import utils as hellaswag_utils  # noqa: E402

TEXT = ["A man is sitting on a roof. He starts pulling up roofing on a roof. " * 3,
        "A woman is outside with a bucket and a dog. The dog is running around trying to "
        "avoid a bath. She gets the dog wet, then it runs away again. Café crème, naïve. " * 3]

# HellaSwag's format (rowanz/hellaswag data/hellaswag_val.jsonl): (activity_label, ctx_a,
# ctx_b, endings). WikiHow's brackets ([header], [title], [step], [substeps]), double spaces and
# an ending's leading space for preprocess; a ctx_b in capitals for capitalize; non-ASCII
# endings (accents, CJK, an em dash); two contexts past the block, cropped. The labels make
# the three accuracies differ, and each of the wrong lengths (the old bytes of " " + ending,
# characters or bytes counting the space) changes one of them.
ITEMS = [
    ("Removing ice from car", "Then, the man writes over the snow covering the window of a car, "
     "and a woman wearing winter clothes smiles.", "then",
     [", the man adds wax to the windshield and cuts it.", ", a person board a ski lift.",
      ", the man puts on a christmas coat.", ", the man continues removing the snow on his car."]),
    ("Baking cookies", "A female chef in white uniform shows a stack of baking pans.", "the PANS",
     ["contain egg yolks — and soda.", "are then sprinkled with brown sugar.", "are café crème.",
      "are filled with pastries."]),
    ("Pets and Animals", "[header] How to bathe a dog [title] Get the dog wet. [step] Use a cup.",
     "", ["[title] Rinse the dog. [step] Be  gentle.", "Naïve dogs run.", "Dogs run naive.",
          "犬が走る。 [substeps] Then it runs."]),
    ("Roof shingle removal", "A man is sitting on a roof. " * 6, "he",
     ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a cube.",
      "starts pulling up roofing on a roof."]),
    ("Bathing dog", "She gets the dog wet,", "", [" then it runs away again.", "and it", "ü",
                                                  "then the dog is happy and dry and warm."]),
    # Where each length makes its own choice (the model below): characters 1 and bytes 0 here,
    ("Cooking", "A woman holds a pan. She", "", ["crêpes.", "crepes.", "über.", "uber."]),
    # characters 0, bytes 1, bytes with the leading space 2, characters with it 3 (and the sum 3),
    ("Cooking", "A woman holds a pan. She", "", ["naive.", "über.", "ü", "u"]),
    # characters 1, bytes 0, bytes with the space 2, characters with it 3.
    ("Cooking", "A woman holds a pan. She", "", ["über.", "uber.", "ü", "u"]),
]
LABELS = [3, 1, 1, 2, 0, 0, 0, 0]  # acc 2/8, acc_norm 4/8, acc_bytes 5/8 with the model below


@pytest.fixture(scope="module")
def setup():
  tok = tokenizer_lib.train_tokenizer(TEXT, 300, show_progress=False)
  cfg = model.ModelConfig(vocab_size=300, block_size=64, d_model=16, n_layer=1, n_head=2)
  params = model.init_params(cfg, jax.random.key(0))
  params = {**params, "wte": params["wte"] * 40}  # peaked logits: endings differ by nats
  return tok, cfg, params


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("hellaswag") / "hellaswag_val.jsonl"
  path.write_text("".join(json.dumps(
      {"ind": i, "activity_label": label, "ctx_a": a, "ctx_b": b, "ctx": f"{a} {b}",
       "split": "val", "split_type": "indomain", "label": LABELS[i], "endings": endings,
       "source_id": f"test~{i}"}) + "\n" for i, (label, a, b, endings) in enumerate(ITEMS)))
  return str(path)


@functools.partial(jax.jit, static_argnames="cfg")
def _log_softmax(params, tokens_BT, cfg):
  return jax.nn.log_softmax(model.forward(params, tokens_BT, cfg), axis=-1)


class Adapter(TemplateLM):
  """lm-eval's view of our model: it tokenizes (``tok_encode``) and scores token rows."""

  def __init__(self, tok, cfg, params):
    super().__init__()
    self.tok, self.cfg, self.params = tok, cfg, params

  @property
  def eot_token_id(self):
    return self.cfg.vocab_size - 1

  def tok_encode(self, string, add_special_tokens=None, **kwargs):
    return tokenizer_lib.encode(self.tok, string)

  def _loglikelihood_tokens(self, requests, **kwargs):
    out = []
    for _, context, continuation in requests:
      row = np.array((context + continuation)[-(self.cfg.block_size + 1):])  # HFLM's crop
      assert len(continuation) < len(row)  # as HFLM needs: the file keeps endings short
      # One row, padded on the right to the block (causal: the padding changes nothing
      # before it; one shape, one compilation).
      tokens_T = np.zeros(self.cfg.block_size, np.int32)
      tokens_T[:len(row) - 1] = row[:-1]
      logp_TV = np.asarray(_log_softmax(self.params, tokens_T[None], self.cfg)[0])
      targets = np.arange(len(row) - 1 - len(continuation), len(row) - 1)
      greedy = bool((logp_TV[targets].argmax(-1) == row[targets + 1]).all())
      out.append((float(logp_TV[targets, row[targets + 1]].sum()), greedy))
    return out

  def loglikelihood_rolling(self, requests, disable_tqdm=False):
    raise NotImplementedError

  def generate_until(self, requests, disable_tqdm=False):
    raise NotImplementedError


def lm_eval_scores(adapter, path: str, cache_dir: str) -> dict:
  """lm-eval's own hellaswag task (its yaml, process_docs, metrics, evaluator) on ``path``:
  the aggregate results and the per-document samples."""
  config = load_yaml(os.path.join(os.path.dirname(hellaswag_utils.__file__), "hellaswag.yaml"))
  config.update(task="hellaswag_local", dataset_path="json", training_split=None,
                dataset_kwargs={"data_files": {"validation": path}, "cache_dir": cache_dir},
                metric_list=config["metric_list"] + [
                    {"metric": "acc_bytes", "aggregation": "mean", "higher_is_better": True}])
  # evaluate(), not simple_evaluate(): the latter indexes every packaged task (30 s).
  out = evaluator.evaluate(lm=adapter, task_dict={"hellaswag_local": ConfigurableTask(config=config)},
                           bootstrap_iters=0, log_samples=True)
  return out["results"]["hellaswag_local"], out["samples"]["hellaswag_local"]


def test_tasks_scores_hellaswag_as_lm_eval_does(setup, task_file, tmp_path):
  tok, cfg, params = setup
  theirs, samples = lm_eval_scores(Adapter(tok, cfg, params), task_file, str(tmp_path / "hf"))
  examples = tasks.read_hellaswag(task_file)  # the default style: lm-eval's
  # The same texts: lm-eval's query and choices are our context and endings.
  assert [(s["doc"]["query"], s["doc"]["choices"]) for s in samples] == [
      (e.context, list(e.endings)) for e in examples]
  # The file exercises what separates the metrics: some document where acc_norm (characters)
  # and acc_bytes choose apart, and one where acc and acc_norm do.
  assert any(s["acc_norm"] != s["acc_bytes"] for s in samples)
  assert any(s["acc"] != s["acc_norm"] for s in samples)
  ours = tasks.hellaswag(params, cfg, tasks.encode(examples, tok, cfg.block_size))
  assert len(tokenizer_lib.encode(tok, examples[3].context)) > cfg.block_size  # a cropped row
  # As the two print them (evaluate: tasks.describe, 4 digits), and exactly.
  for name in ("acc", "acc_norm", "acc_bytes"):
    assert f"{ours[name]:.4f}" == f"{theirs[name + ',none']:.4f}", name
    assert ours[name] == pytest.approx(theirs[name + ",none"], abs=1e-12), name
  assert ours["examples"] == theirs["sample_len"] == len(ITEMS)
