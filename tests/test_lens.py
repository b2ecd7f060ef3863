"""The lens reads the scanned model without changing it: each result against an independent route.

Tiny shapes, random weights made "lively" (every bias and LayerNorm parameter far from its
init value) so a dropped bias or a misplaced norm shows up.
"""

import numpy as np
import jax
import jax.numpy as jnp
import pytest

from andrea_jax import diagnostics, errors, model
from andrea_jax.model import ModelConfig
from andrea_jax.tools import lens

ATOL = 2e-5

# Compiled once per config and shared by the tests (eager calls would recompile each scan).
forward = jax.jit(model.forward, static_argnums=2)
loss_fn = jax.jit(model.loss_fn, static_argnums=3)
capture = jax.jit(lens.capture, static_argnums=2, static_argnames=("streams", "outputs", "attention"))
logit_lens = jax.jit(lens.logit_lens, static_argnums=3)
dla = jax.jit(lens.direct_logit_attribution, static_argnums=3)
ablated_loss = jax.jit(lens.ablated_loss, static_argnums=3)
head_ablation = jax.jit(lens.head_ablation, static_argnums=(3, 4, 5))
head_means = jax.jit(lens.head_means, static_argnums=2)
attention_probs = jax.jit(diagnostics.attention_probs, static_argnums=(2, 3))
# The untied variants also pad the vocabulary (padded logits are -inf); the pre-norm one
# also has the per-head query and key norms and muP's scales (attention 1/d_head, readout
# multiplier).
VARIANTS = [dict(norm=n, tie_embeddings=t, vocab_pad_multiple=1 if t else 16)
            for n in ("pre", "post") for t in (True, False)]
IDS = [f"{v['norm']}-{'tied' if v['tie_embeddings'] else 'untied-padded'}" for v in VARIANTS]
VARIANTS[1].update(qk_norm=True, parametrization="mup", base_width=8)
IDS[1] += "-qknorm-mup"


def tiny_cfg(**changes):
  return ModelConfig(**{**dict(vocab_size=61, block_size=12, d_model=24, n_layer=2, n_head=4),
                        **changes})


def lively(params, seed=1, scale=0.3):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda x: jnp.asarray(np.asarray(x) + scale * rng.standard_normal(x.shape),
                                            x.dtype), params)


def batch(cfg, B=2, seed=0):
  ids = np.random.default_rng(seed).integers(0, cfg.vocab_size, (B, cfg.block_size + 1))
  return jnp.asarray(ids[:, :-1], jnp.int32), jnp.asarray(ids[:, 1:], jnp.int32)


@pytest.fixture(params=VARIANTS, ids=IDS)
def setup(request):
  cfg = tiny_cfg(**request.param)
  return lively(model.init_params(cfg, jax.random.key(0))), cfg, *batch(cfg)


def nll(logits, targets):
  logp = jax.nn.log_softmax(logits, axis=-1)
  return -np.take_along_axis(np.asarray(logp), np.asarray(targets)[..., None], -1)[..., 0]


# ----------------------------------------------------------------------------- capture


def test_capture_leaves_the_logits_unchanged(setup):
  params, cfg, x, _ = setup
  want = forward(params, x, cfg)  # ModelConfig's default attention_impl
  plain = capture(params, x, cfg)
  np.testing.assert_array_equal(plain["logits_BTV"], want)  # the model's own ops, bit for bit
  full = capture(params, x, cfg, streams=True, outputs=True, attention=True)
  np.testing.assert_allclose(full["logits_BTV"], want, atol=1e-6, rtol=0)


def test_captured_streams_are_the_residual_pattern(setup):
  params, cfg, x, _ = setup
  c = capture(params, x, cfg, streams=True, outputs=True)
  s, f = np.asarray(c["streams_PBTD"]), np.asarray(c["outputs_SBTD"])
  assert s.shape == (2 * cfg.n_layer + 1, *x.shape, cfg.d_model)
  np.testing.assert_allclose(s[0], model.embed(params, x, cfg), atol=ATOL)
  blocks = params["blocks"]
  for i in range(2 * cfg.n_layer):
    if cfg.norm == "pre":
      np.testing.assert_allclose(s[i + 1], s[i] + f[i], atol=ATOL)
    else:
      ln = blocks["ln_1" if i % 2 == 0 else "ln_2"]
      want = model.layer_norm(s[i] + f[i], ln["scale"][i // 2], ln["bias"][i // 2], cfg.ln_eps)
      np.testing.assert_allclose(s[i + 1], want, atol=ATOL)
  np.testing.assert_allclose(c["final_BTD"], s[-1], atol=ATOL)
  norm = lambda a: np.linalg.norm(a, axis=-1)
  np.testing.assert_allclose(c["norm_PBT"], norm(s), rtol=1e-5)
  np.testing.assert_allclose(c["rel_norm_SBT"], norm(f) / norm(s[:-1]), rtol=1e-5)
  np.testing.assert_allclose(c["cos_SBT"], np.sum(f * s[:-1], -1) / (norm(f) * norm(s[:-1])),
                             atol=1e-5)


def test_attention_probs_match_the_diagnostics_route(setup):
  params, cfg, x, _ = setup
  probs = capture(params, x, cfg, attention=True)["probs_LBHTS"]
  for layer in range(cfg.n_layer):
    np.testing.assert_allclose(probs[layer], attention_probs(params, x, cfg, layer),
                               atol=1e-5)


# ----------------------------------------------------------------------------- logit lens


def test_lens_at_the_last_point_is_the_model(setup):
  params, cfg, x, y = setup
  logits = forward(params, x, cfg)
  out = logit_lens(params, x, y, cfg)
  assert out["nll_PBT"].shape == (2 * cfg.n_layer + 1, *x.shape)
  np.testing.assert_allclose(out["nll_PBT"][-1], nll(logits, y), atol=ATOL)
  assert float(jnp.mean(out["nll_PBT"][-1])) == pytest.approx(float(loss_fn(params, x, y, cfg)),
                                                              abs=ATOL)
  np.testing.assert_array_equal(out["top_PBT"][-1], jnp.argmax(logits, -1))
  assert bool(jnp.all(out["agree_PBT"][-1]))
  np.testing.assert_allclose(out["kl_PBT"][-1], 0.0, atol=1e-5)
  # Earlier points decode the captured stream as the head would: ln_f (pre-norm) then unembed.
  streams = capture(params, x, cfg, streams=True)["streams_PBTD"]
  for p in range(2 * cfg.n_layer + 1):
    np.testing.assert_allclose(out["nll_PBT"][p], nll(model.unembed(params, streams[p], cfg), y),
                               atol=1e-4)
  assert float(jnp.max(out["kl_PBT"][0])) > 1e-3  # the embedding alone is not the model


# ----------------------------------------------------------------------------- direct logit attribution


def test_attributions_sum_to_the_target_logit(setup):
  # Exact up to rounding: each frozen LayerNorm (std at its actual input) is linear.
  params, cfg, x, y = setup
  out = dla(params, x, y, cfg)
  want = np.take_along_axis(np.asarray(forward(params, x, cfg)), np.asarray(y)[..., None], -1)[..., 0]
  np.testing.assert_allclose(out["logit_BT"], want, atol=ATOL)
  total = out["embed_BT"] + out["sublayers_SBT"].sum(0) + out["bias_BT"]
  np.testing.assert_allclose(total, want, atol=1e-4)
  assert out["sublayers_SBT"].shape == (2 * cfg.n_layer, *x.shape)
  assert float(jnp.min(jnp.abs(out["bias_BT"]))) > 0  # lively LayerNorm biases do reach the head
  assert out["heads_LHBT"].shape == (cfg.n_layer, cfg.n_head, *x.shape)


def test_attributions_by_hand_pre_norm():
  # Pre-norm with ln_f frozen at the final stream: removing the last MLP's output from the
  # normalised stream lowers the logit by exactly its attribution; an attention sublayer's
  # share is its heads' shares plus its output bias's.
  cfg = tiny_cfg()
  params = lively(model.init_params(cfg, jax.random.key(0)))
  x, y = batch(cfg)
  c = capture(params, x, cfg, outputs=True)
  out = dla(params, x, y, cfg)
  final, f_last = np.asarray(c["final_BTD"], np.float64), np.asarray(c["outputs_SBTD"][-1], np.float64)
  sd = np.sqrt(final.var(-1, keepdims=True) + cfg.ln_eps)
  frozen = lambda s: ((s - s.mean(-1, keepdims=True)) / sd * np.asarray(params["ln_f"]["scale"])
                      + np.asarray(params["ln_f"]["bias"]))
  u = np.asarray(params["wte"], np.float64)[np.asarray(y)]
  change = np.sum((frozen(final) - frozen(final - f_last)) * u, -1)
  np.testing.assert_allclose(out["sublayers_SBT"][-1], change, atol=1e-4)
  b_out = np.asarray(params["blocks"]["attn"]["b_out"], np.float64)  # (L, D)
  bias_share = np.sum((frozen(final) - frozen(final - b_out[:, None, None])) * u, -1)
  np.testing.assert_allclose(np.asarray(out["heads_LHBT"]).sum(1),
                             out["sublayers_SBT"][0::2] - bias_share, atol=1e-4)


# ----------------------------------------------------------------------------- head ablation


def test_ablating_no_head_is_the_baseline(setup):
  params, cfg, x, y = setup
  loss = float(loss_fn(params, x, y, cfg))
  keep = jnp.ones((cfg.n_layer, cfg.n_head))
  assert float(ablated_loss(params, x, y, cfg, keep)) == pytest.approx(loss, abs=ATOL)
  assert float(head_ablation(params, x, y, cfg)["baseline"]) == pytest.approx(loss, abs=ATOL)


def without_heads(params, layer, heads, cfg, bias=None):
  """The model with ``heads`` of ``layer`` removed from its output projection, by hand."""
  K = cfg.head_dim
  w = np.array(params["blocks"]["attn"]["w_out"])
  b = np.array(params["blocks"]["attn"]["b_out"])
  for h in heads:
    w[layer, h * K:(h + 1) * K] = 0.0
  if bias is not None:
    b[layer] = bias
  attn = {**params["blocks"]["attn"], "w_out": jnp.asarray(w), "b_out": jnp.asarray(b)}
  return {**params, "blocks": {**params["blocks"], "attn": attn}}


def test_zero_ablating_a_whole_layer_removes_its_attention_branch(setup):
  # All heads zeroed: the branch adds only its bias b_out (which belongs to no head).
  params, cfg, x, y = setup
  for layer in range(cfg.n_layer):
    keep = jnp.ones((cfg.n_layer, cfg.n_head)).at[layer].set(0.0)
    want = loss_fn(without_heads(params, layer, range(cfg.n_head), cfg), x, y, cfg)
    assert float(ablated_loss(params, x, y, cfg, keep)) == pytest.approx(float(want), abs=ATOL)


def test_mean_ablating_a_whole_layer_replaces_its_branch_by_its_mean(setup):
  # Every head at its mean: the branch output is its own mean over batch and positions,
  # read here from the branch outputs model.attention gave.
  params, cfg, x, y = setup
  outputs = capture(params, x, cfg, outputs=True)["outputs_SBTD"]
  means = head_means(params, x, cfg)
  layer = cfg.n_layer - 2
  keep = jnp.ones((cfg.n_layer, cfg.n_head)).at[layer].set(0.0)
  mean_branch = np.asarray(outputs[2 * layer]).mean(axis=(0, 1))
  want = loss_fn(without_heads(params, layer, range(cfg.n_head), cfg, mean_branch), x, y, cfg)
  got = ablated_loss(params, x, y, cfg, keep, means)
  assert float(got) == pytest.approx(float(want), abs=1e-4)


def test_ablation_heatmap_matches_removing_each_head_by_hand():
  cfg = tiny_cfg(n_layer=2)
  params = lively(model.init_params(cfg, jax.random.key(3)))
  x, y = batch(cfg)
  out = head_ablation(params, x, y, cfg, "zero", 3)
  assert out["loss_LH"].shape == (cfg.n_layer, cfg.n_head)
  for layer in range(cfg.n_layer):
    for h in range(cfg.n_head):
      want = loss_fn(without_heads(params, layer, [h], cfg), x, y, cfg)
      assert float(out["loss_LH"][layer, h]) == pytest.approx(float(want), abs=ATOL)
  mean = head_ablation(params, x, y, cfg, "mean")["loss_LH"]
  assert not np.allclose(mean, out["loss_LH"])  # a head's mean output is not zero


def test_unknown_ablation_mode_is_refused():
  cfg = tiny_cfg()
  with pytest.raises(errors.ConfigError, match="mode='ones'"):
    head_ablation(model.init_params(cfg, jax.random.key(0)), *batch(cfg), cfg, "ones")


# ----------------------------------------------------------------------------- an imported GPT-2


def test_lens_reads_an_imported_transformers_gpt2(tmp_path):
  torch = pytest.importorskip("torch", reason="needs torch (pip install -r requirements-interop.txt)")
  transformers = pytest.importorskip("transformers", reason="needs transformers "
                                     "(pip install -r requirements-interop.txt)")
  pytest.importorskip("safetensors", reason="needs safetensors")
  from andrea_jax.interop import hf_gpt2  # pylint: disable=import-outside-toplevel
  transformers.logging.set_verbosity_error()
  torch.manual_seed(0)
  m = transformers.GPT2LMHeadModel(transformers.GPT2Config(
      n_embd=32, n_layer=2, n_head=4, n_positions=16, vocab_size=67, bos_token_id=66,
      eos_token_id=66, attn_implementation="eager")).eval()  # eager: it returns attentions
  with torch.no_grad():
    for p in m.parameters():
      p.add_(0.3 * torch.randn_like(p))
  m.save_pretrained(str(tmp_path))
  params, cfg = hf_gpt2.import_gpt2(str(tmp_path))
  ids = np.random.default_rng(0).integers(0, 67, (2, 16))
  with torch.no_grad():
    out = m(torch.tensor(ids), labels=torch.tensor(ids))
  x, y = jnp.asarray(ids[:, :-1], jnp.int32), jnp.asarray(ids[:, 1:], jnp.int32)
  c = capture(params, jnp.asarray(ids, jnp.int32), cfg, attention=True)
  np.testing.assert_allclose(c["logits_BTV"], out.logits.numpy(), atol=1e-4)
  want_probs = m(torch.tensor(ids), output_attentions=True).attentions
  np.testing.assert_allclose(c["probs_LBHTS"], np.stack([a.detach().numpy() for a in want_probs]),
                             atol=1e-5)
  lensed = logit_lens(params, x, y, cfg)
  assert float(jnp.mean(lensed["nll_PBT"][-1])) == pytest.approx(float(out.loss), abs=1e-4)
  attr = dla(params, x, y, cfg)
  np.testing.assert_allclose(attr["embed_BT"] + attr["sublayers_SBT"].sum(0) + attr["bias_BT"],
                             attr["logit_BT"], atol=1e-4)
  abl = head_ablation(params, x, y, cfg)
  assert float(abl["baseline"]) == pytest.approx(float(out.loss), abs=1e-4)
