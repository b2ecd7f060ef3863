"""Hugging Face GPT-2 interop: exact round trips, parity with transformers, and refusals.

The round-trip and refusal tests need only ``safetensors``; the parity tests also need
``torch`` and ``transformers`` (``pip install -r requirements-interop.txt``) and are
skipped with that reason when those are missing.
"""

import json
import os
import stat

import jax
import numpy as np
import pytest

from andrea_jax import config as config_lib
from andrea_jax import configdict
from andrea_jax import errors
from andrea_jax import loader as loader_lib
from andrea_jax import metrics as metrics_lib
from andrea_jax import model
from andrea_jax import prepare as prepare_lib
from andrea_jax import shards
from andrea_jax import tokenizer as tokenizer_lib
from andrea_jax import train
from andrea_jax.model import ModelConfig

pytest.importorskip("safetensors", reason="export/import need safetensors "
                    "(pip install -r requirements-interop.txt)")
from andrea_jax.interop import hf_gpt2  # pylint: disable=wrong-import-position
from andrea_jax.interop.hf_gpt2 import InteropError  # pylint: disable=wrong-import-position
from experiments.configs import tiny  # pylint: disable=wrong-import-position

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_interop")

TINY = ModelConfig(vocab_size=67, block_size=16, d_model=32, n_layer=2, n_head=4)
TEXT = "def f(x):\n    return x @ w  # héllo wörld 🙂\n\n<|endoftext|> is just text here."
ATOL = 1e-4


def tiny_cfg(**changes):
  return ModelConfig(**{**TINY.__dict__, **changes})


def lively(params, seed=1, scale=0.3):
  # GPT-2 init has zero biases and unit LayerNorm scales, so a swapped bias or scale
  # would go unnoticed; large random values everywhere make every tensor matter.
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: (np.asarray(x, np.float32) + scale * rng.standard_normal(x.shape))
                      .astype(x.dtype), params)


def tokens(cfg, B=3, seed=0):
  return np.random.default_rng(seed).integers(0, cfg.vocab_size, (B, cfg.block_size)).astype(np.int32)


def assert_trees_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def small_tokenizer():
  text = open(model.__file__, encoding="utf-8").read()
  return tokenizer_lib.train_tokenizer([text], 300, show_progress=False)


# ----------------------------------------------------------------------------- no torch needed


@pytest.mark.parametrize("changes", [{}, {"tie_embeddings": False}, {"mlp_ratio": 1.5},
                                     {"activation": "relu"}, {"activation": "gelu", "ln_eps": 1e-6},
                                     {"activation": "relu2"}])
def test_export_then_import_gives_identical_params(changes, tmp_path):
  cfg = tiny_cfg(**changes)
  params = lively(model.init_params(cfg, jax.random.key(0)))
  hf_gpt2.export_gpt2(params, cfg, str(tmp_path))
  back, back_cfg = hf_gpt2.import_gpt2(str(tmp_path))
  assert hf_gpt2.config_differences(cfg, back_cfg) == []
  assert_trees_equal(params, back)
  written = json.load(open(tmp_path / "config.json"))
  assert written["n_inner"] == (None if cfg.mlp_dim == 4 * cfg.d_model else cfg.mlp_dim)
  assert written["tie_word_embeddings"] == cfg.tie_embeddings
  assert written["eos_token_id"] == written["bos_token_id"] == cfg.vocab_size - 1


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_exported_files_share_one_mode_the_umask_allows(umask, small_tokenizer, tmp_path):
  cfg = tiny_cfg(vocab_size=300)
  old = os.umask(umask)
  try:
    hf_gpt2.export_gpt2(model.init_params(cfg, jax.random.key(0)), cfg, str(tmp_path / "out"),
                        tokenizer=small_tokenizer)
  finally:
    os.umask(old)
  modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
  assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(modes)
  assert set(modes.values()) == {0o666 & ~umask}, {k: oct(v) for k, v in modes.items()}


def test_interop_errors_are_the_projects_errors():
  assert issubclass(InteropError, errors.AndreaError)


def test_bfloat16_params_are_exported_as_float32(tmp_path):
  cfg = tiny_cfg(param_dtype="bfloat16")
  params = model.init_params(cfg, jax.random.key(0))
  hf_gpt2.export_gpt2(params, cfg, str(tmp_path))
  back, _ = hf_gpt2.import_gpt2(str(tmp_path))
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(back))
  assert_trees_equal(jax.tree.map(lambda x: np.asarray(x, np.float32), params), back)


@pytest.mark.parametrize("changes, match", [
    ({"norm": "post"}, r"model.norm='post': GPT-2 blocks are pre-norm"), ({"activation": "swiglu"}, "SwiGLU"),
    ({"qk_norm": True}, r"model.qk_norm=True: GPT-2's attention has no LayerNorm on queries"
                        r"(.|\n)*export a model trained with qk_norm=False"),
    ({"parametrization": "mup", "base_width": 16}, r"model.parametrization='mup': GPT-2 computes"
                                                  r"(.|\n)*trained with parametrization='sp'"),
    ({"readout_multiplier": 2.0}, r"model.readout_multiplier=2.0: GPT-2's config has no multiplier"
                                  r"(.|\n)*readout_multiplier=1.0"),
    ({"depth_rule": "completep", "base_depth": 1}, r"model.depth_rule='completep' at n_layer=2 "
                                                   r"(.|\n)*trained with depth_rule='none'"),
    ({"position": "rope"}, r"model.position='rope': GPT-2 adds a learned position table"
                           r"(.|\n)*only model.position='learned'"),
    ({"bias": False}, r"model.bias=False: every GPT-2 linear layer and LayerNorm has a bias")])
def test_variants_gpt2_cannot_express_are_refused(changes, match, tmp_path):
  cfg = tiny_cfg(**changes)
  with pytest.raises(InteropError, match=match) as e:
    hf_gpt2.export_gpt2(model.init_params(cfg, jax.random.key(0)), cfg, str(tmp_path))
  assert isinstance(e.value, errors.ConfigError)  # a config GPT-2 cannot hold
  assert not os.listdir(tmp_path)  # nothing half-written


def _rewrite_tensors(path, edit):
  from safetensors.numpy import load_file, save_file  # pylint: disable=import-outside-toplevel
  tensors = load_file(str(path))
  edit(tensors)
  save_file(tensors, str(path))


@pytest.mark.parametrize("edit, match", [
    (lambda t: t.pop("transformer.h.1.mlp.c_fc.bias"), "lacks tensor 'transformer.h.1.mlp.c_fc.bias'"),
    (lambda t: t.update({"transformer.h.0.attn.q_proj.weight": np.zeros((32, 32), np.float32)}),
     "unexpected tensor 'transformer.h.0.attn.q_proj.weight'"),
    (lambda t: t.update({"transformer.wpe.weight": np.zeros((8, 32), np.float32)}),
     r"'transformer.wpe.weight' has shape \(8, 32\), expected \(16, 32\)"),
    (lambda t: t.update({"lm_head.weight": t["transformer.wte.weight"] + 1}), "tie_word_embeddings"),
])
def test_bad_tensors_are_named(edit, match, tmp_path):
  hf_gpt2.export_gpt2(model.init_params(TINY, jax.random.key(0)), TINY, str(tmp_path))
  _rewrite_tensors(tmp_path / "model.safetensors", edit)
  with pytest.raises(InteropError, match=match):
    hf_gpt2.import_gpt2(str(tmp_path))


def test_bad_directories_and_configs_are_refused(tmp_path):
  with pytest.raises(InteropError, match="no config.json"):
    hf_gpt2.import_gpt2(str(tmp_path))
  hf_gpt2.export_gpt2(model.init_params(TINY, jax.random.key(0)), TINY, str(tmp_path))
  cfg_path = tmp_path / "config.json"
  good = json.load(open(cfg_path))
  for change, match in [({"activation_function": "silu"}, "activation_function='silu'"),
                        ({"model_type": "llama"}, "model_type='llama'"),
                        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse")]:
    json.dump({**good, **change}, open(cfg_path, "w"))
    with pytest.raises(InteropError, match=match):
      hf_gpt2.import_gpt2(str(tmp_path))
  cfg_path.write_text("{")
  with pytest.raises(InteropError, match=r"config\.json is not valid JSON \(.*\); save the"):
    hf_gpt2.import_gpt2(str(tmp_path))
  json.dump(good, open(cfg_path, "w"))
  (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file at all")
  with pytest.raises(InteropError, match="not a readable safetensors file"):
    hf_gpt2.import_gpt2(str(tmp_path))
  os.remove(tmp_path / "model.safetensors")
  with pytest.raises(InteropError, match="has no model.safetensors"):
    hf_gpt2.import_gpt2(str(tmp_path))


def test_bytes_first_undoes_a_gpt2_style_numbering(small_tokenizer):
  # OpenAI's GPT-2 numbers its 256 byte tokens in another order; build such a model and
  # tokenizer from an andrea_jax one, and check bytes_first recovers the original exactly.
  cfg = tiny_cfg(vocab_size=300, tie_embeddings=False)
  params = lively(model.init_params(cfg, jax.random.key(0)))
  perm = np.arange(300)
  perm[:256] = np.random.default_rng(0).permutation(256)  # old id perm[i] -> new id i
  spec = json.loads(small_tokenizer.to_str())
  inverse = np.argsort(perm)
  spec["model"]["vocab"] = {s: int(inverse[i]) for s, i in spec["model"]["vocab"].items()}
  from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
  gpt2_tok = Tokenizer.from_str(json.dumps(spec))
  gpt2_params = {**params, "wte": params["wte"][perm], "lm_head": params["lm_head"][:, perm]}
  with pytest.raises(tokenizer_lib.TokenizerError):
    tokenizer_lib.check_layout(gpt2_tok, 300)
  back, back_tok = hf_gpt2.bytes_first(gpt2_params, cfg, gpt2_tok)
  assert_trees_equal(params, back)
  assert back_tok.get_vocab(True) == small_tokenizer.get_vocab(True)
  assert tokenizer_lib.encode(back_tok, TEXT) == tokenizer_lib.encode(small_tokenizer, TEXT)


# ----------------------------------------------------------------------------- against transformers


@pytest.fixture(scope="module")
def hf():
  torch = pytest.importorskip("torch", reason="parity tests need torch "
                              "(pip install -r requirements-interop.txt)")
  transformers = pytest.importorskip("transformers", reason="parity tests need transformers "
                                     "(pip install -r requirements-interop.txt)")
  transformers.logging.set_verbosity_error()
  return torch, transformers


def random_hf_model(hf, seed=0, **config):
  torch, transformers = hf
  torch.manual_seed(seed)
  kwargs = dict(n_embd=32, n_layer=2, n_head=4, n_positions=16, vocab_size=67,
                bos_token_id=66, eos_token_id=66, **config)
  m = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kwargs)).eval()
  with torch.no_grad():
    for p in m.parameters():  # see lively(): every tensor must matter
      p.add_(0.3 * torch.randn_like(p))
  return m


def hf_logits_and_loss(hf, m, ids):
  torch, _ = hf
  with torch.no_grad():
    out = m(torch.tensor(ids, dtype=torch.long), labels=torch.tensor(ids, dtype=torch.long))
  return out.logits.numpy(), float(out.loss)


def our_logits_and_loss(params, cfg, ids):
  # transformers' labels= shifts inside: logits[:, :-1] predict ids[:, 1:].
  logits = np.asarray(model.forward(params, ids, cfg))[..., :cfg.vocab_size]  # no padding
  return logits, float(model.loss_fn(params, ids[:, :-1], ids[:, 1:], cfg))


VARIANTS = [
    {},
    {"activation_function": "gelu_pytorch_tanh", "layer_norm_epsilon": 1e-6},
    {"activation_function": "gelu", "n_inner": 48},
    {"activation_function": "relu", "tie_word_embeddings": False},
]


@pytest.mark.parametrize("variant", VARIANTS)
def test_imported_transformers_model_gives_its_logits_and_loss(variant, hf, tmp_path):
  m = random_hf_model(hf, **variant)
  m.save_pretrained(str(tmp_path))
  params, cfg = hf_gpt2.import_gpt2(str(tmp_path))
  assert cfg.tie_embeddings == variant.get("tie_word_embeddings", True)
  assert cfg.mlp_dim == variant.get("n_inner", 128)
  ids = tokens(cfg)
  want_logits, want_loss = hf_logits_and_loss(hf, m, ids)
  logits, loss = our_logits_and_loss(params, cfg, ids)
  np.testing.assert_allclose(logits, want_logits, atol=ATOL, rtol=0)
  assert loss == pytest.approx(want_loss, abs=ATOL)


@pytest.mark.parametrize("changes", [{}, {"tie_embeddings": False, "activation": "relu", "mlp_ratio": 2.0},
                                     {"vocab_pad_multiple": 128, "dropout": 0.1},
                                     {"activation": "relu2"}])
def test_exported_model_gives_our_logits_in_transformers(changes, hf, tmp_path):
  cfg = tiny_cfg(**changes)
  params = lively(model.init_params(cfg, jax.random.key(0)))
  hf_gpt2.export_gpt2(params, cfg, str(tmp_path))
  m = hf[1].GPT2LMHeadModel.from_pretrained(str(tmp_path)).eval()
  assert m.config.tie_word_embeddings == cfg.tie_embeddings
  # GPT-2's three dropouts (training only, as ours): the model's one rate.
  assert m.config.embd_pdrop == m.config.attn_pdrop == m.config.resid_pdrop == cfg.dropout
  ids = tokens(cfg)
  want_logits, want_loss = our_logits_and_loss(params, cfg, ids)
  logits, loss = hf_logits_and_loss(hf, m, ids)
  np.testing.assert_allclose(logits, want_logits, atol=ATOL, rtol=0)
  assert loss == pytest.approx(want_loss, abs=ATOL)


def test_pytorch_bin_of_an_old_style_checkpoint_is_read_weights_only(hf, tmp_path):
  # Bare GPT2Model names and causal-mask buffers, as in the original gpt2 checkpoints.
  torch, _ = hf
  m = random_hf_model(hf)
  m.save_pretrained(str(tmp_path / "st"))
  state = {k.removeprefix("transformer."): v for k, v in m.state_dict().items() if k != "lm_head.weight"}
  state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 16, 16))
  state["h.0.attn.masked_bias"] = torch.tensor(-1e4)
  (tmp_path / "bin").mkdir()
  torch.save(state, str(tmp_path / "bin" / "pytorch_model.bin"))
  os.rename(tmp_path / "st" / "config.json", tmp_path / "bin" / "config.json")
  params, cfg = hf_gpt2.import_gpt2(str(tmp_path / "bin"))
  logits, _ = our_logits_and_loss(params, cfg, tokens(cfg))
  np.testing.assert_allclose(logits, hf_logits_and_loss(hf, m, tokens(cfg))[0], atol=ATOL, rtol=0)


class _RunsCode:
  """A pickle payload that would create a file if unpickled with code allowed."""

  def __init__(self, path):
    self.path = path

  def __reduce__(self):
    return (os.mkdir, (self.path,))


def test_pickles_that_are_not_weights_only_and_junk_are_refused(hf, tmp_path):
  torch, _ = hf
  hf_gpt2.export_gpt2(model.init_params(TINY, jax.random.key(0)), TINY, str(tmp_path))
  os.remove(tmp_path / "model.safetensors")
  marker = str(tmp_path / "code_ran")
  torch.save({"transformer.wte.weight": torch.zeros(67, 32), "x": _RunsCode(marker)},
             str(tmp_path / "pytorch_model.bin"))
  with pytest.raises(InteropError, match="not a weights-only PyTorch state dict"):
    hf_gpt2.import_gpt2(str(tmp_path))
  assert not os.path.exists(marker)
  (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04junk that is no pickle")
  with pytest.raises(InteropError, match="refused"):
    hf_gpt2.import_gpt2(str(tmp_path))


def test_exported_tokenizer_loads_in_transformers_with_our_ids(hf, small_tokenizer, tmp_path):
  cfg = tiny_cfg(vocab_size=300)
  hf_gpt2.export_gpt2(model.init_params(cfg, jax.random.key(0)), cfg, str(tmp_path),
                      tokenizer=small_tokenizer)
  auto = hf[1].AutoTokenizer.from_pretrained(str(tmp_path))
  ids = tokenizer_lib.encode(small_tokenizer, TEXT)
  assert auto(TEXT)["input_ids"] == ids  # the literal <|endoftext|> stays bytes in both
  assert auto.decode(ids) == TEXT
  assert auto.eos_token_id == auto.bos_token_id == tokenizer_lib.eot_id(small_tokenizer) == 299


# ----------------------------------------------------------------------------- fine-tuning


SHRINK = {"model.n_layer": 1, "model.d_model": 32, "model.n_head": 2, "model.block_size": 32,
          "model.vocab_size": 321, "data.max_docs": 40, "train.batch_size": 4, "train.steps": 2,
          "train.warmup_steps": 0, "train.log_every": 1, "train.eval_every": 2,
          "train.eval_batches": 1, "checkpoint.every": 2, "sample.num_samples": 0}


def small_config(cache_dir, **changes):
  return configdict.apply_overrides(tiny.get_config(),
                                    {**SHRINK, "data.cache_dir": str(cache_dir), **changes})


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, data_cache):
  """A GPT-2 directory of the small config's shape, with the prepared data's tokenizer."""
  cache = data_cache
  prepared = prepare_lib.prepare(config_lib.RunConfig.from_configdict(small_config(cache)))
  cfg = ModelConfig(**small_config(cache).model)
  params = lively(model.init_params(cfg, jax.random.key(7)), scale=0.05)
  hf_dir = str(tmp_path_factory.mktemp("hf"))
  hf_gpt2.export_gpt2(params, cfg, hf_dir, tokenizer=tokenizer_lib.load(prepared.tokenizer_path))
  return cache, hf_dir, params, prepared


def test_fine_tuning_starts_from_the_imported_params(pretrained, tmp_path):
  cache, hf_dir, params, _ = pretrained
  config = small_config(cache, **{"train.init_from": hf_dir,
                                  "data.tokenizer_path": f"{hf_dir}/tokenizer.json"})
  result = train.train_and_evaluate(config, str(tmp_path))
  assert result.status == "completed"
  cfg = ModelConfig(**config.model)
  train_paths = json.load(open(tmp_path / "data.json"))["train_paths"]
  first = loader_lib.batch_at(shards.TokenStream(train_paths), 0, batch_size=4,
                              block_size=cfg.block_size, seed=config.data.shuffle_seed)
  want = float(model.loss_fn(params, first[:, :-1], first[:, 1:], cfg))
  first_loss = [r["loss"] for r in metrics_lib.read_metrics(str(tmp_path)) if "loss" in r][0]
  assert first_loss == pytest.approx(want, abs=1e-5)  # a random init would be ~log(321)


@pytest.mark.parametrize("changes, match", [
    ({"model.n_layer": 2}, r"n_layer: 1 vs 2(.|\n)*--config.model.n_layer=1"),
    ({"model.qk_norm": True}, r"qk_norm: False vs True(.|\n)*--config.model.qk_norm=False"),
    ({"data.tokenizer_path": ""}, "needs the checkpoint's own tokenizer"),
])
def test_fine_tuning_refuses_a_mismatch(changes, match, pretrained):
  cache, hf_dir, _, _ = pretrained
  config = small_config(cache, **{"train.init_from": hf_dir,
                                  "data.tokenizer_path": f"{hf_dir}/tokenizer.json", **changes})
  with pytest.raises(InteropError, match=match):
    hf_gpt2.init_from(config_lib.RunConfig.from_configdict(config))


def test_fine_tuning_refuses_another_tokenizer(pretrained, small_tokenizer, tmp_path):
  cache, hf_dir, _, _ = pretrained
  tokenizer_lib.save(small_tokenizer, str(tmp_path / "other.json"))
  config = small_config(cache, **{"train.init_from": hf_dir,
                                  "data.tokenizer_path": str(tmp_path / "other.json")})
  with pytest.raises(InteropError, match="is not the tokenizer of train.init_from"):
    hf_gpt2.init_from(config_lib.RunConfig.from_configdict(config))


def test_a_model_name_offline_is_one_line_and_a_directory_is_itself(tmp_path, monkeypatch):
  """``--hf_dir=gpt2`` reads as a published model's name: fetched from the Hub when online;
  offline, one line saying it needs the network or a local directory."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, "-m", "experiments.import_hf", "--hf_dir=gpt2"], env=env,
                        capture_output=True, text=True, timeout=120, check=False)
  assert done.returncode == errors.EXIT_USER_ERROR, done.stderr
  assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: --hf_dir='gpt2' is not a local "
                                                                 "directory"), done.stderr
  assert "needs the network, or pass a local directory" in done.stderr
  assert hf_gpt2.resolve_hf_dir(str(tmp_path)) == str(tmp_path)
  a_file = tmp_path / "f"
  a_file.write_text("x")
  with pytest.raises(InteropError, match="is a file"):
    hf_gpt2.resolve_hf_dir(str(a_file))
