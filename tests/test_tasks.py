"""HellaSwag's scorer against log-likelihoods computed by hand, its file format, its download."""

import json
import re
import urllib.error
import urllib.request

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from andrea_jax import errors
from andrea_jax import model
from andrea_jax import tasks
from andrea_jax import tokenizer as tokenizer_lib

TEXT = ["A man is sitting on a roof. He starts pulling up roofing on a roof. " * 3,
        "A woman is outside with a bucket and a dog. The dog is running around trying to "
        "avoid a bath. She gets the dog wet, then it runs away again. " * 3]

# HellaSwag's own JSONL (rowanz/hellaswag data/hellaswag_val.jsonl): activity_label, ctx_a,
# ctx_b, ctx, endings, label, and fields no style reads. The second lacks ctx (llm.c's style
# joins ctx_a and ctx_b); the third's context is longer than the model's block, so its rows
# are cropped from the left; the fourth has WikiHow's brackets (lm-eval's preprocess).
EXAMPLES = [
    {"ind": 4, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow covering the window of a car, and a woman wearing winter clothes smiles.", "ctx_b": "then", "ctx": "Then, the man writes over the snow covering the window of a car, and a woman wearing winter clothes smiles. then",
     "endings": [", the man adds wax to the windshield and cuts it.", ", a person board a ski lift, while two men supporting the head of the person wearing winter clothes snow as the we girls sled.", ", the man puts on a christmas coat, knitted with netting.", ", the man continues removing the snow on his car."], "split": "val", "split_type": "indomain"},
    {"activity_label": "Baking cookies", "ctx_a": "A female chef in white uniform shows a stack of baking pans in a large kitchen presenting them.", "ctx_b": "the pans",
     "endings": ["contain egg yolks and baking soda.", "are then sprinkled with brown sugar.", "are placed in a strainer on the counter.", "are filled with pastries and loaded into the oven."]},
    {"activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof. " * 4, "ctx_b": "he", "ctx": "A man is sitting on a roof. " * 4 + "he",
     "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."]},
    {"activity_label": "Pets and Animals", "ctx_a": "[header] How to bathe a dog [title] Get the dog wet. [step] The dog", "ctx_b": "", "ctx": "[header] How to bathe a dog [title] Get the dog wet. [step] The dog",
     "endings": ["runs.", "is running around trying to avoid a bath. [substeps]  Then it runs away.", "sits.", "a"]},
    {"activity_label": "Bathing dog", "ctx_a": "She gets the dog wet,", "ctx_b": "", "ctx": "She gets the dog wet,",
     "endings": [" then it runs away again.", "and it", "x", "then the dog is happy and dry and warm and asleep."]},
]


@pytest.fixture(scope="module")
def setup():
  tok = tokenizer_lib.train_tokenizer(TEXT, 300, show_progress=False)
  cfg = model.ModelConfig(vocab_size=300, block_size=16, d_model=16, n_layer=1, n_head=2)
  params = model.init_params(cfg, jax.random.key(0))
  params = {**params, "wte": params["wte"] * 40}  # peaked logits: endings differ by nats
  return tok, cfg, params


def write(path, examples):
  path.write_text("".join(json.dumps(e) + "\n" for e in examples))
  return str(path)


def row_sum(tok, cfg, params, context: list[int], end: list[int]) -> float:
  """The summed log-likelihood of ``end`` after ``context``, one unpadded row: the last
  block_size + 1 tokens; log_softmax of model.forward."""
  row = (context + end)[-(cfg.block_size + 1):]
  logp_TV = jax.nn.log_softmax(model.forward(params, jnp.array([row[:-1]]), cfg)[0], axis=-1)
  first = len(row) - 1 - min(len(end), len(row) - 1)  # the completion's first target
  return sum(float(logp_TV[t, row[t + 1]]) for t in range(first, len(row) - 1))


def llmc_by_hand(tok, cfg, params, example) -> tuple[list[float], list[int]]:
  """llm.c's render_example: ctx's tokens, then " " + ending's apart; the sums and the
  completions' token counts."""
  context = example.get("ctx") or example["ctx_a"] + " " + example["ctx_b"]
  ends = [tokenizer_lib.encode(tok, " " + ending) for ending in example["endings"]]
  return ([row_sum(tok, cfg, params, tokenizer_lib.encode(tok, context), end) for end in ends],
          [min(len(end), cfg.block_size) for end in ends])


def lmeval_by_hand(tok, cfg, params, example) -> tuple[list[float], list[str]]:
  """lm-eval's hellaswag: the context and choices preprocessed, the pair tokenized whole and
  split after the context's tokens; the sums and the choices."""
  context = tasks.preprocess(f"{example['activity_label']}: {example['ctx_a']} "
                             f"{example['ctx_b'].capitalize()}")
  choices = [tasks.preprocess(e) for e in example["endings"]]
  context_ids = tokenizer_lib.encode(tok, context)
  wholes = [tokenizer_lib.encode(tok, f"{context} {choice}") for choice in choices]
  return ([row_sum(tok, cfg, params, context_ids, whole[len(context_ids):]) for whole in wholes],
          choices)


def accuracies(sums, lengths, labels) -> float:
  return float(np.mean(np.argmax(np.asarray(sums) / np.asarray(lengths), axis=1) == labels))


def test_llmc_scores_are_the_completions_log_likelihoods_computed_by_hand(setup, tmp_path):
  tok, cfg, params = setup
  assert len(tokenizer_lib.encode(tok, EXAMPLES[2]["ctx"])) > cfg.block_size  # it is cropped
  hand, ntokens = zip(*(llmc_by_hand(tok, cfg, params, e) for e in EXAMPLES))
  per_token = np.array(hand) / np.array(ntokens)
  labels = np.argmax(per_token, axis=1)  # acc_norm right everywhere, acc not
  assert (np.argmax(hand, axis=1) != labels).any()
  path = write(tmp_path / "hellaswag.jsonl",
               [{**e, "label": int(l)} for e, l in zip(EXAMPLES, labels)])
  encoded = tasks.encode(tasks.read_hellaswag(path, style="llmc"), tok, cfg.block_size, "llmc")
  got = tasks.completion_logprobs(params, cfg, encoded, batch_examples=2)  # a padded last batch
  np.testing.assert_allclose(got, hand, rtol=1e-5, atol=1e-4)
  assert tasks.accuracy(got, encoded) == {"acc": accuracies(hand, 1, labels), "acc_norm": 1.0,
                                          "examples": 5, "style": "llmc"}
  assert tasks.read_hellaswag(path, 2, "llmc")[1].context == EXAMPLES[1]["ctx_a"] + " the pans"


def test_lmeval_scores_are_the_completions_log_likelihoods_computed_by_hand(setup, tmp_path):
  tok, cfg, params = setup
  hand, choices = zip(*(lmeval_by_hand(tok, cfg, params, e) for e in EXAMPLES))
  chars = [[len(c) for c in cs] for cs in choices]
  nbytes = [[len(c.encode()) for c in cs] for cs in choices]
  labels = np.argmax(np.array(hand) / np.array(chars), axis=1)
  assert (np.argmax(hand, axis=1) != labels).any()
  path = write(tmp_path / "hellaswag.jsonl",
               [{**e, "label": int(l)} for e, l in zip(EXAMPLES, labels)])
  examples = tasks.read_hellaswag(path)  # lmeval: the default
  assert examples[3].context == "Pets and Animals: How to bathe a dog. Get the dog wet. The dog"
  assert examples[3].endings[1] == "is running around trying to avoid a bath.  Then it runs away."
  assert examples[1].context == ("Baking cookies: A female chef in white uniform shows a stack "
                                 "of baking pans in a large kitchen presenting them. The pans")
  encoded = tasks.encode(examples, tok, cfg.block_size)
  got = tasks.completion_logprobs(params, cfg, encoded, batch_examples=2)
  np.testing.assert_allclose(got, hand, rtol=1e-5, atol=1e-4)
  assert tasks.accuracy(got, encoded) == {
      "acc": accuracies(hand, 1, labels), "acc_norm": 1.0,
      "acc_bytes": accuracies(hand, nbytes, labels), "examples": 5, "style": "lmeval"}


def test_lmeval_refuses_a_file_without_its_fields_naming_llmc(tmp_path):
  path = write(tmp_path / "h.jsonl", [{"ctx": "The dog", "endings": ["a", "b", "c", "d"],
                                       "label": 0}])
  with pytest.raises(errors.DataError, match=re.escape(
      f"{path}, line 1: not a HellaSwag example (KeyError: 'activity_label'); expected an "
      f"object with activity_label, ctx_a, ctx_b, endings (4) and label; a file with ctx alone "
      f"is scored as llm.c scores it with --task_style=llmc")):
    tasks.read_hellaswag(path)
  assert tasks.read_hellaswag(path, style="llmc")[0].context == "The dog"


def test_an_unknown_style_is_one_line_naming_the_styles():
  with pytest.raises(errors.ConfigError, match=re.escape(
      "--task_style='harness': expected one of ('lmeval', 'llmc')")):
    tasks.read_hellaswag("unread.jsonl", style="harness")


@pytest.mark.parametrize("line, message", [
    ('{"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["d", "e"], "label": 0}',
     "line 2: expected 4 endings and a label in 0..3"),
    ('{"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "label": 0}',
     "line 2: not a HellaSwag example (KeyError: 'endings')"),
    ("not json", "line 2: not a HellaSwag example (JSONDecodeError")])
def test_a_line_that_is_not_an_example_is_one_line_naming_it(tmp_path, line, message):
  path = tmp_path / "h.jsonl"
  path.write_text(json.dumps({**EXAMPLES[0], "label": 1}) + "\n" + line + "\n")
  with pytest.raises(errors.DataError, match="^" + re.escape(f"{path}, {message}")):
    tasks.read_hellaswag(str(path))


def test_offline_the_download_is_one_line_naming_task_file(tmp_path, monkeypatch):
  def offline(*args, **kwargs):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

  monkeypatch.setattr(urllib.request, "urlopen", offline)
  with pytest.raises(errors.DataError) as e:
    tasks.hellaswag_file(cache_dir=str(tmp_path))
  assert "\n" not in str(e.value) and str(e.value).startswith(
      f"hellaswag: cannot download {tasks.HELLASWAG_URL} (")
  assert "--task_file=path/to/hellaswag_val.jsonl" in str(e.value)
  assert not (tmp_path / "hellaswag").exists()


def test_online_the_set_is_downloaded_once_into_the_cache(tmp_path, monkeypatch):
  calls = []

  class Response:
    def __init__(self, url, timeout):
      calls.append(url)

    def read(self):
      return b'{"ctx": "a", "endings": ["b", "c", "d", "e"], "label": 2}\n'

    def __enter__(self):
      return self

    def __exit__(self, *exc):
      pass

  monkeypatch.setattr(urllib.request, "urlopen", Response)
  path = tasks.hellaswag_file(cache_dir=str(tmp_path))
  assert path == str(tmp_path / "hellaswag" / "hellaswag_val.jsonl")
  assert tasks.hellaswag_file(cache_dir=str(tmp_path)) == path and calls == [tasks.HELLASWAG_URL]
  assert tasks.read_hellaswag(path, style="llmc") == [tasks.Example("a", ("b", "c", "d", "e"), 2)]
