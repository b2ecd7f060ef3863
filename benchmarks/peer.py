"""The PyTorch peer of the benchmarks: ``transformers.GPT2LMHeadModel`` of our shape
(GELU-tanh, tied head, no dropout, SDPA attention) and its training step with
``torch.optim.AdamW`` and global-norm clipping; eager float32 on a CPU (its best default
there), ``torch.compile`` with bf16 autocast on GPUs.

Install it with ``pip install -r requirements-bench.txt``; ``peer_available`` says why
it cannot run where it is missing.
"""

from __future__ import annotations

import numpy as np

from andrea_jax import model


def peer_model(cfg: model.ModelConfig, device: str = "cpu"):
  """``transformers.GPT2LMHeadModel`` of ``cfg``'s shape (GELU-tanh, tied head, no dropout, SDPA)."""
  from transformers import GPT2Config, GPT2LMHeadModel  # pylint: disable=import-outside-toplevel
  hf = GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.block_size, n_embd=cfg.d_model,
                  n_layer=cfg.n_layer, n_head=cfg.n_head, n_inner=cfg.mlp_dim,
                  activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                  attn_pdrop=0.0, layer_norm_epsilon=cfg.ln_eps, tie_word_embeddings=True)
  hf._attn_implementation = "sdpa"  # PyTorch's fused scaled_dot_product_attention
  net = GPT2LMHeadModel(hf)
  # Named, so that transformers does not warn inside the compiled forward: its logger call
  # is a torch.compile graph break, and the loss and backward ran outside the graph.
  net.loss_type = "ForCausalLM"
  return net.to(device).train()


def peer_step(cfg: model.ModelConfig, t, batch: int, seq: int, accelerator: bool,
              compile_backend: str | None = None, autocast: bool | None = None):
  """One peer training step as a function. On an accelerator: CUDA, ``torch.compile``
  and bf16 autocast; ``compile_backend`` / ``autocast`` ask for them explicitly (any device).
  """
  import torch  # pylint: disable=import-outside-toplevel
  device = "cuda" if accelerator else "cpu"
  net = peer_model(cfg, device)
  opt = torch.optim.AdamW(net.parameters(), lr=t.learning_rate, betas=(t.b1, t.b2), eps=t.eps,
                          weight_decay=t.weight_decay)
  if compile_backend or accelerator:
    fwd = torch.compile(net, backend=compile_backend or "inductor")
  else:
    fwd = net
  ids = torch.from_numpy(np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, seq + 1)))
  ids = ids.to(device)
  amp = torch.autocast(device, dtype=torch.bfloat16,
                       enabled=accelerator if autocast is None else autocast)

  def run():
    with amp:
      loss = fwd(input_ids=ids[:, :-1], labels=ids[:, :-1]).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), t.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if accelerator:
      torch.cuda.synchronize()
    return float(loss.detach())

  return run


def peer_available() -> str | None:
  try:
    import torch  # pylint: disable=import-outside-toplevel,unused-import
    import transformers  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError as e:
    return (f"the PyTorch peer is not installed ({e.name} missing): "
            f"pip install -r requirements-bench.txt")
  return None


# ----------------------------------------------------------------------------- training (the speedrun)


def nanogpt_adamw(net, t):
  """``torch.optim.AdamW`` as nanoGPT configures it (model.py, ``configure_optimizers``: every
  parameter of 2 or more dimensions decays, biases and LayerNorm gains do not; the rule
  ``andrea_jax/step.py``'s ``DECAYED`` follows), at ``t``'s rate, betas, eps and decay."""
  import torch  # pylint: disable=import-outside-toplevel
  params = list(net.parameters())  # the tied embedding and head once
  groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": t.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
  return torch.optim.AdamW(groups, lr=t.learning_rate, betas=(t.b1, t.b2), eps=t.eps)


def peer_train(cfg: model.ModelConfig, t, batches, val_batches: np.ndarray, lrs, clock=None
               ) -> list[dict]:
  """Train the peer (``peer_model``, ``nanogpt_adamw``, clipping at ``t.grad_clip``) for
  ``t.steps`` updates on ``batches`` (the ``[B, T + 1]`` token windows ours trains on, in
  order), update ``k`` at rate ``lrs[k]``, evaluating on ``val_batches`` (``[n, B, T + 1]``)
  at step 0 (with ``t.eval_at_start``), every ``t.eval_every`` steps and at the end: each
  evaluation's step, tokens, training seconds and loss. The seconds count the steps alone, the
  evaluations left out, as ``workdir.Clock`` counts ours (``clock``: seconds, for tests)."""
  import time  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import torch.nn.functional as F  # pylint: disable=import-outside-toplevel
  clock = clock or time.perf_counter
  torch.manual_seed(t.seed)
  net = peer_model(cfg)
  opt = nanogpt_adamw(net, t)
  loss_of = lambda ids: F.cross_entropy(  # nanoGPT's loss (model.py, forward): the mean over tokens
      net(input_ids=ids[:, :-1]).logits.reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1))
  curve, trained = [], 0.0

  def evaluate(step):
    with torch.no_grad():
      loss = float(np.mean([float(loss_of(torch.from_numpy(b).long())) for b in val_batches]))
    curve.append({"step": step, "tokens": step * t.batch_size * cfg.block_size,
                  "seconds": trained, "val_loss": loss})

  if t.eval_at_start:
    evaluate(0)
  for step in range(1, t.steps + 1):
    start = clock()  # the batch's fetch counts, as in ours (the loop's next(batches))
    ids = torch.from_numpy(next(batches)).long()
    for group in opt.param_groups:
      group["lr"] = float(lrs[step - 1])
    loss = loss_of(ids)
    loss.backward()
    if t.grad_clip > 0:
      torch.nn.utils.clip_grad_norm_(net.parameters(), t.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    trained += clock() - start
    if step % t.eval_every == 0 or step == t.steps:
      evaluate(step)
  return curve
