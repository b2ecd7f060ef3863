"""What the diagnostics record of the scan: the largest attention logit per layer, the
output softmax's mean log Z and the logits' RMS, each against a plain computation, through
the real recorder, at step 0, every ``every`` steps and the last step."""

import math

import jax
import jax.numpy as jnp
import numpy as np

from andrea_jax import config as config_lib
from andrea_jax import diagnostics
from andrea_jax import model


def reference_logit_max(params, tokens_BT, cfg):
  """Per layer: the largest ``q . k`` scaled as the model does, over causal entries, from
  the raw weights (each block's input from ``model.block_forward``)."""
  H, K = cfg.n_head, cfg.head_dim
  x, out = model.embed(params, tokens_BT, cfg), []
  for l in range(cfg.n_layer):
    b = jax.tree.map(lambda a, l=l: a[l], params["blocks"])
    h = model.layer_norm(x, b["ln_1"]["scale"], b["ln_1"]["bias"]) if cfg.norm == "pre" else x
    B, T, _ = h.shape
    q, k, _ = (a.reshape(B, T, H, K) for a in jnp.split(h @ b["attn"]["w_qkv"] + b["attn"]["b_qkv"], 3, -1))
    if cfg.qk_norm:
      standard = lambda a: (a - a.mean(-1, keepdims=True)) / jnp.sqrt(a.var(-1, keepdims=True) + 1e-5)
      q = standard(q) * b["attn"]["q_norm"]["scale"] + b["attn"]["q_norm"]["bias"]
      k = standard(k) * b["attn"]["k_norm"]["scale"] + b["attn"]["k_norm"]["bias"]
    # sp: sqrt(d_head); muP: d_head / sqrt(d_head at the base width) (its "inverse" rule: d_head).
    if cfg.parametrization != "mup":
      d = math.sqrt(K)
    else:
      d = K if cfg.mup_attention == "inverse" else K / math.sqrt(cfg.base_width / H)
    s = jnp.einsum("bthk,bshk->bhts", q, k) / d
    out.append(float(jnp.max(jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf))))
    x = model.block_forward(b, x, cfg)
  return out


def test_recorder_writes_attention_logit_maxima_log_z_and_logit_rms(tmp_path):
  # The maxima in blocks of 4 queries (T = 12: a partial block); every scale muP and the
  # query/key norms change; the logits' statistics over the real vocabulary only.
  cfg = model.ModelConfig(vocab_size=61, block_size=16, d_model=32, n_layer=3, n_head=4,
                          attention_impl="xla_flash", attention_block=4, qk_norm=True,
                          parametrization="mup", base_width=16, tie_embeddings=False,
                          vocab_pad_multiple=8)
  params = model.init_params(cfg, jax.random.key(0))
  rng = np.random.default_rng(0)  # weights far from init: logits of order 1 and more
  params = jax.tree.map(lambda a: a + 0.3 * jnp.asarray(rng.standard_normal(a.shape), a.dtype), params)
  batch = rng.integers(0, cfg.vocab_size, (2, 13)).astype(np.int32)  # T = 12: a partial block
  d = config_lib.DiagnosticsConfig(enabled=True, every=5, early_steps=0)
  recorder = diagnostics.Recorder(d, cfg, batch, [str(tmp_path)], last_step=7)
  for step in (0, 3, 7):  # step 0 and the last step, not 3 (every 5)
    recorder.record(step, params)
  recorder.close()
  rows = diagnostics.read(str(tmp_path))
  assert [r["step"] for r in rows] == [0, 7]
  row = rows[0]
  np.testing.assert_allclose(row["attn_logit_max"], reference_logit_max(params, batch[:, :-1], cfg),
                             rtol=1e-5)
  logits = model.forward(params, batch[:, :-1], cfg)[..., :cfg.vocab_size]
  np.testing.assert_allclose(row["log_z"], float(jnp.mean(jax.nn.logsumexp(logits, -1))), rtol=1e-5)
  np.testing.assert_allclose(row["logit_rms"], float(jnp.sqrt(jnp.mean(logits ** 2))), rtol=1e-5)
  assert len(row["residual_norm"]) == cfg.n_layer + 1  # the probe's other rows are still there


def test_dyt_saturation_is_the_share_of_each_dyt_input_past_two_over_alpha():
  """Against a plain loop: a pre-LN DyT block's norms read the stream each sublayer reads
  (``on_sublayer``'s ``x_read``); the share with ``|alpha x| > 2`` per block (mean of ln_1's and
  ln_2's), then the final norm's. Alphas drawn per norm, so a norm read with another's alpha,
  or a block's input taken for its MLP norm's, gives other numbers."""
  cfg = model.ModelConfig(vocab_size=61, block_size=16, d_model=32, n_layer=3, n_head=2,
                          norm_type="dyt", remat_policy="none", attention_impl="xla")
  params = model.init_params(cfg, jax.random.PRNGKey(0))
  k1, k2, k3 = jax.random.split(jax.random.PRNGKey(1), 3)
  params["blocks"]["ln_1"]["alpha"] = jax.random.uniform(k1, (3,), minval=20.0, maxval=200.0)
  params["blocks"]["ln_2"]["alpha"] = jax.random.uniform(k2, (3,), minval=20.0, maxval=200.0)
  params["ln_f"]["alpha"] = jnp.asarray(60.0)
  tokens = jax.random.randint(k3, (2, 16), 0, 61)
  x, want = model.embed(params, tokens, cfg), []
  share = lambda h, a: float(np.mean(np.abs(float(a) * np.asarray(h)) > 2.0))
  for l in range(cfg.n_layer):
    b = jax.tree.map(lambda a, l=l: a[l], params["blocks"])
    reads = []
    x = model.block_forward(b, x, cfg, on_sublayer=lambda i, x_read, f, x_new: reads.append(x_read), layer=l)
    want.append((share(reads[0], b["ln_1"]["alpha"]) + share(reads[1], b["ln_2"]["alpha"])) / 2)
  want.append(share(x, params["ln_f"]["alpha"]))
  got = np.asarray(diagnostics.dyt_saturation(params, tokens, cfg))
  assert 0.0 < min(want) and max(want) < 1.0  # neither end: a wrong input or alpha shows
  np.testing.assert_allclose(got, want, atol=1e-6)
  assert "dyt_saturation" in diagnostics.probe(params, jnp.concatenate([tokens, tokens[:, :1]], 1), cfg)
  pre = model.ModelConfig(vocab_size=61, block_size=16, d_model=32, n_layer=3, n_head=2)
  assert "dyt_saturation" not in diagnostics.probe(model.init_params(pre, k1), tokens, pre)
