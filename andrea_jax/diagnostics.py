"""Per-layer diagnostics: what the norm-placement literature makes claims about.

- gradient norms of each layer's attention and MLP weights (Xiong et al. 2020: at init
  post-LN's grow toward the output layers, pre-LN's are nearly flat);
- the residual stream's norm after the embedding and after every block (pre-LN's grows
  with depth, post-LN's is held at sqrt(d_model) by its norms);
- the size of the early updates, ``|delta W| / |W|`` per layer;
- under DyT, the share of each DyT's inputs where its tanh saturates, ``|alpha x| > 2``
  (``dyt_saturation``): where it nears 1 the norm passes signs and nothing else (the
  failure issue 69's referee found at d64);
- the largest attention logit per layer (``attn_logit_max``), the mean ``log Z`` of the
  output softmax (``log_z``) and the output logits' root mean square (``logit_rms``), the
  quantities that grow before attention-logit growth and output-logit divergence
  (Wortsman et al. 2023); the model's own layer scan and loss gather them
  (``model.loss_terms(..., stats=True)``) in the probe's forward and backward pass.

``Recorder`` writes them to ``diagnostics.jsonl`` in the workdir during training, through
``metrics.Writer``.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

from andrea_jax import branches
from andrea_jax import config as config_lib
from andrea_jax import metrics
from andrea_jax import model
from andrea_jax.model_config import ModelConfig
from andrea_jax.norms import normaliser, placement
from andrea_jax.precision import at_least_f32

FILENAME = "diagnostics.jsonl"
ATTN_WEIGHTS = ("w_qkv", "w_out")
MLP_WEIGHTS = ("w_in", "w_out")


def layer_norms(blocks) -> dict:
  """Frobenius norm per layer of the attention and the MLP weight matrices: ``{name: [L]}``."""
  per = lambda group, names: jnp.sqrt(sum(jnp.sum(jnp.square(blocks[group][n].astype(jnp.float32)),
                                                  axis=tuple(range(1, blocks[group][n].ndim)))
                                          for n in names))
  return {"attn": per("attn", ATTN_WEIGHTS), "mlp": per("mlp", MLP_WEIGHTS)}


def residual_norms(params, tokens_BT, cfg: ModelConfig) -> jax.Array:
  """Mean per-token L2 norm of the residual stream: after the embedding, then each block."""
  x_BTD = model.embed(params, tokens_BT, cfg)
  norm = lambda x: jnp.mean(jnp.linalg.norm(x.astype(jnp.float32), axis=-1))
  step = lambda x, block, layer, _: (model.block_forward(block, x, cfg, layer=layer),) * 2
  _, xs_LBTD = model.scan_layers(step, x_BTD, params["blocks"], cfg)
  return jnp.concatenate([norm(x_BTD)[None], jax.vmap(norm)(xs_LBTD)])


# |alpha x| above which tanh is within 4 % of +-1 (tanh 2 = 0.964): a saturated DyT input.
SATURATED = 2.0


def dyt_saturation(params, tokens_BT, cfg: ModelConfig, threshold: float = SATURATED) -> jax.Array:
  """The share of DyT inputs with ``|alpha x| > threshold``, per block and then the final norm:
  ``[n_layer + 1]`` (each block's entry the mean over its DyT norms, in the order the
  placement applies them; the last entry NaN where the final norm is not a DyT).

  Computed on the model's own block: the placement's residual pattern, with each norm
  wrapped to look at its input and its own ``alpha`` (``ln_1`` in the attention sublayer,
  ``ln_2`` in the MLP one, ``*_out`` for a branch-output norm).
  """
  share = lambda h, alpha: jnp.mean((jnp.abs(at_least_f32(alpha) * at_least_f32(h)) > threshold)
                                    .astype(jnp.float32))
  pattern = placement(cfg.norm).sublayer

  def step(x, block, layer, _):
    seen, calls = [], []

    def sublayer(x, f, n, n_out, site):
      ln = ("ln_1", "ln_2")[len(calls)]
      calls.append(ln)
      look = lambda norm, leaves: (lambda h: (seen.append(share(h, leaves["alpha"])), norm(h))[1])
      return pattern(x, f, look(n, block[ln]), None if n_out is None else look(n_out, block[ln + "_out"]),
                     site)

    x = model.block_forward(block, x, cfg, sublayer=sublayer, layer=layer)
    return x, jnp.mean(jnp.stack(seen))

  x_BTD = model.embed(params, tokens_BT, cfg)
  x_BTD, per_layer = model.scan_layers(step, x_BTD, params["blocks"], cfg)
  final = params.get("ln_f", {})
  last = share(x_BTD, final["alpha"]) if "alpha" in final else jnp.asarray(jnp.nan, jnp.float32)
  return jnp.concatenate([per_layer, last[None]])


def probe(params, batch_BT, cfg: ModelConfig) -> dict:
  """Loss, per-layer gradient norms, residual norms and attention logit maxima on one batch,
  and the output logits' size: the softmax's mean ``log Z`` and the logits' RMS; under DyT,
  the share of its saturated inputs (``dyt_saturation``)."""
  loss_terms = functools.partial(model.loss_terms, stats=True)
  (loss, terms), grads = jax.value_and_grad(loss_terms, has_aux=True)(
      params, batch_BT[:, :-1], batch_BT[:, 1:], cfg)
  g = layer_norms(grads["blocks"])
  return {"loss": loss, "grad_attn": g["attn"], "grad_mlp": g["mlp"],
          "residual_norm": residual_norms(params, batch_BT[:, :-1], cfg),
          "attn_logit_max": terms["attn_logit_max"], "log_z": terms["log_z"],
          "logit_rms": terms["logit_rms"],
          **({"dyt_saturation": dyt_saturation(params, batch_BT[:, :-1], cfg)}
             if normaliser(cfg.norm_type).alpha else {})}


def relative_update(before, after) -> dict:
  """``|W_after - W_before| / |W_before|`` per layer, for attention and MLP weights."""
  delta = layer_norms(jax.tree.map(jnp.subtract, after["blocks"], before["blocks"]))
  base = layer_norms(before["blocks"])
  return {"update_attn": delta["attn"] / base["attn"], "update_mlp": delta["mlp"] / base["mlp"]}


def gradient_flow(params, tokens_BT, cfg: ModelConfig, residual: bool = True,
                  layer_norm: bool = True) -> jax.Array:
  """Norm of d(loss)/d(residual stream) at the input of every block and after the last.

  The loss is the model's next-token loss on ``tokens``: inputs ``tokens[:, :-1]``,
  targets ``tokens[:, 1:]``. Returns ``[n_layer + 1]``: entry 0 is the gradient reaching
  the embeddings. With ``residual=False`` the skip connections are removed (each sublayer
  replaces its input); with ``layer_norm=False`` the norms are removed. This is the seed's
  gradient-flow claim made measurable; notebook 2 plots it and the tests check it.
  """
  inputs_BT, targets_BT = tokens_BT[:, :-1], tokens_BT[:, 1:]
  # The model's own block; the ablations replace only its residual pattern (x, f, n, ...) -> x'.
  ablated = {(True, True): None, (True, False): lambda x, f, n, *_: x + f(x),
             (False, True): lambda x, f, n, *_: f(n(x)), (False, False): lambda x, f, n, *_: f(x)}
  block = lambda b, x, i: model.block_forward(b, x, cfg, sublayer=ablated[residual, layer_norm],
                                              layer=i)

  def loss(probes_LBTD, x_BTD):
    # A zero added at each block's input: its gradient is the gradient at that point.
    step = lambda x, b, layer, probe_BTD: (block(b, x + probe_BTD, layer), None)
    h, _ = model.scan_layers(step, x_BTD, params["blocks"], cfg, probes_LBTD[:-1])
    logits_BTV = model.unembed(params, h + probes_LBTD[-1], cfg)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT))

  x_BTD = model.embed(params, inputs_BT, cfg)
  probes = jnp.zeros((cfg.n_layer + 1, *x_BTD.shape), x_BTD.dtype)
  g = jax.grad(loss)(probes, x_BTD)
  return jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.float32)), axis=(1, 2, 3)))


def attention_logits(params, tokens_BT, cfg: ModelConfig, layer: int) -> jax.Array:
  """Attention logits ``[B, H, T, T]`` of block ``layer`` (pre-norm or post-norm input): the
  scores its softmax sees, ``-inf`` above the diagonal (the future is masked)."""
  x = model.embed(params, tokens_BT, cfg)
  for i in range(layer):
    x = model.block_forward(jax.tree.map(lambda a, i=i: a[i], params["blocks"]), x, cfg, layer=i)
  block = jax.tree.map(lambda a: a[layer], params["blocks"])
  seen = {}

  def attn_fn(h, attn):  # what the block's attention reads, whatever the placement
    seen["q"], seen["k"], _ = branches.qkv_project(h, attn, cfg)
    return branches.attention(h, attn, cfg)

  model.block_forward(block, x, cfg, attn_fn=attn_fn, layer=layer)
  q, k = seen["q"], seen["k"]
  T = tokens_BT.shape[1]
  s = jnp.einsum("bthk,bshk->bhts", q, k) / jnp.sqrt(cfg.head_dim).astype(q.dtype)
  return jnp.where(jnp.tril(jnp.ones((T, T), bool)), s.astype(jnp.float32), -jnp.inf)


def attention_probs(params, tokens_BT, cfg: ModelConfig, layer: int) -> jax.Array:
  """Attention probabilities ``[B, H, T, T]`` of block ``layer``."""
  return jax.nn.softmax(attention_logits(params, tokens_BT, cfg, layer), axis=-1)


class Recorder:
  """Records ``probe`` at step 0, every ``every`` steps and at ``last_step`` (the end of
  training, so the final values are always there), and the first updates' sizes, to each
  member's ``diagnostics.jsonl`` (``stacked``: parameters of a group, one per member)."""

  def __init__(self, d: config_lib.DiagnosticsConfig, cfg: ModelConfig,
               batch_BT: np.ndarray, dirs: list[str], stacked: bool = False,
               last_step: int | None = None):
    self.every, self.early_steps, self.stacked = d.every, d.early_steps, stacked
    self.last_step = last_step
    over = jax.vmap if stacked else (lambda fn: fn)
    self._probe = jax.jit(over(lambda p: probe(p, batch_BT, cfg)))
    self._update = jax.jit(over(relative_update))
    self.writers = [metrics.Writer(w, tensorboard=False, filename=FILENAME) for w in dirs]

  def _write(self, step: int, values: dict, alive) -> None:
    host = jax.device_get(values)
    for i, writer in enumerate(self.writers):
      if alive is None or alive[i]:
        writer.write(step, {k: np.asarray(v[i] if self.stacked else v).tolist()
                            for k, v in host.items()})

  def wants_snapshot(self, step: int) -> bool:
    """Whether the parameters before update ``step`` (1-based) must be kept."""
    return step <= self.early_steps

  def snapshot(self, params):
    return jax.tree.map(jnp.copy, params)  # the train step donates (overwrites) its input

  def record(self, step: int, params, before=None, alive=None) -> None:
    """Write the probes due at ``step`` for the members ``alive`` (default: all)."""
    values = {}
    if step in (0, self.last_step) or (self.every and step % self.every == 0):
      values.update(self._probe(params))
    if before is not None:
      values.update(self._update(before, params))
    if values:
      self._write(step, values, alive)

  def close(self) -> None:
    for writer in self.writers:
      writer.close()


def read(workdir: str) -> list[dict]:
  """Rows of ``diagnostics.jsonl``, one per step; after a resume the newest values win."""
  return metrics.read_jsonl(os.path.join(workdir, FILENAME))
