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
