"""The step core (step_lib.init_state / train_step): accumulation, clipping, and the skip of a
step that diverges, checked by what the step computes."""

import dataclasses
import functools
import re

import chex

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from andrea_jax import configdict
from andrea_jax import model
from andrea_jax import schedule as schedule_lib
from andrea_jax import step as step_lib

# Its tests share module-scoped fixtures: on one xdist worker they are computed once
# (pyproject.toml: --dist=loadgroup).
pytestmark = pytest.mark.xdist_group("test_step")

CFG = model.ModelConfig(vocab_size=64, block_size=8, d_model=16, n_layer=2, n_head=2,
                        attention_impl="xla_flash", attention_block=4)


def train_settings(**kw):
  t = configdict.group(step_lib.TrainConfig)
  t.warmup_steps, t.learning_rate, t.steps = 0, 1e-2, 10
  t.update(kw)
  return step_lib.TrainConfig(**t)


def compile_step(optimizer, **step_args):
  """The initial state and ``step_lib.train_step`` jitted for ``optimizer`` (both compiled,
  not run op by op: eager dispatch costs more than the step itself at this size)."""
  state = jax.jit(step_lib.init_state, static_argnums=(0, 1))(CFG, optimizer, jax.random.key(0))
  step = jax.jit(functools.partial(step_lib.train_step, cfg=CFG, optimizer=optimizer, **step_args))
  return state, step


@pytest.fixture(scope="module")
def adam():
  """``(settings, optimizer, initial state, jitted step)`` for the project's AdamW at
  ``train_settings()``: one step function for the tests that need no other, so it compiles
  once per batch shape in this module."""
  t = train_settings()
  optimizer = step_lib.make_optimizer(t)
  return (t, optimizer, *compile_step(optimizer))


def rows(n=4, seed=0):
  return np.random.default_rng(seed).integers(0, CFG.vocab_size, (n, CFG.block_size + 1), np.int32)


def test_state_has_no_unused_rng(adam):
  _, _, state, _ = adam
  assert set(state) == {"step", "params", "opt_state", "good"}


def test_accumulating_four_microbatches_equals_one_batch_with_a_real_update(adam):
  # A=1's loss, gradient norm and whole update against optax and jax.grad written out:
  # the clipping test below. Here A=4 (one row each) against A=1.
  _, _, state, step = adam
  batch = rows()
  one, m1 = step(state, batch[None])                       # A=1: [1, 4, T+1]
  four, m2 = step(state, batch.reshape(4, 1, -1))           # A=4: [4, 1, T+1], same rows
  np.testing.assert_allclose(m1["loss"], m2["loss"], rtol=1e-6)
  np.testing.assert_allclose(m1["grad_norm"], m2["grad_norm"], rtol=1e-5)
  moved = [np.max(np.abs(np.asarray(a) - np.asarray(b))) for a, b in
           zip(jax.tree.leaves(one["params"]), jax.tree.leaves(state["params"]))]
  assert min(moved) > 1e-4  # a non-zero learning rate really moved every leaf
  # Up to summation order: gradients that are zero in exact arithmetic (the key bias) are
  # rounding noise, and Adam's first step lr * g / (|g| + eps) amplifies it, hence a
  # tolerance per leaf relative to its largest entry. The norm above and the moments here
  # would show a wrong average (Adam's step alone is blind to the gradient's scale).
  for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(four)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-3 * float(np.max(np.abs(b))))


# ----------------------------------------------------------------------------- dropout

DROPOUT = dataclasses.replace(CFG, dropout=0.2)


def test_dropout_acts_in_the_train_step_alone_keyed_by_the_seed_and_the_step(adam):
  _, optimizer, state, step = adam
  drop_step = jax.jit(lambda state, batch, seed: step_lib.train_step(
      state, batch, DROPOUT, optimizer, seed=seed))
  batch = rows()[None]
  loss = lambda state, seed=0: float(drop_step(state, batch, seed)[1]["loss"])
  dropped = loss(state)
  assert dropped != float(step(state, batch)[1]["loss"])  # the dropout-0 model's train loss
  assert loss(state) == dropped  # reproducible: the key is the seed's and the step's
  assert loss({**state, "step": state["step"] + 5}) != dropped  # another step, other masks
  assert loss(state, seed=1) != dropped  # another seed (a group's member), other masks


RANDOM_PRIMITIVE = re.compile(r"\b(random_\w+|threefry2x32)\b")


def test_at_dropout_zero_the_step_draws_no_random_number_nor_does_evaluation(adam):
  # The cost of dropout at 0 is nothing: no random op in the step's program, and a key
  # given to the model leaves its program as it was without one. Evaluation passes no
  # key: its program with dropout is the dropout-0 model's (deterministic, the same loss).
  _, optimizer, state, _ = adam
  batch = rows().reshape(2, 2, -1)  # two microbatches: the accumulation's scan too
  program = lambda cfg: str(jax.make_jaxpr(functools.partial(
      step_lib.train_step, cfg=cfg, optimizer=optimizer))(state, batch))
  assert not RANDOM_PRIMITIVE.search(program(CFG))
  assert RANDOM_PRIMITIVE.search(program(DROPOUT))
  evaluation = lambda cfg: str(jax.make_jaxpr(functools.partial(step_lib.eval_loss, cfg=cfg))(
      state["params"], batch[0]))
  assert evaluation(DROPOUT) == evaluation(CFG) and not RANDOM_PRIMITIVE.search(evaluation(CFG))
  tokens = batch[0, :, :-1]
  loss = lambda **kw: str(jax.make_jaxpr(
      lambda p: model.loss_terms(p, tokens, tokens, CFG, **kw))(state["params"]))
  assert loss(dropout_key=jax.random.key(1)) == loss()


def assert_unchanged(after, before):
  """Every leaf of the state bit-identical but ``good``, which is False."""
  assert not bool(after["good"])
  for key in ("step", "params", "opt_state"):
    for a, b in zip(jax.tree.leaves(after[key]), jax.tree.leaves(before[key])):
      np.testing.assert_array_equal(a, b)


def test_a_non_finite_loss_from_the_batch_keeps_the_state_and_good_false_for_ever(adam):
  _, _, state, step = adam
  state, _ = step(state, rows()[None])  # one good update first: the Adam moments are non-zero
  assert all(np.all(np.isfinite(a)) for a in jax.tree.leaves(state["params"]))
  bad = rows(seed=1)
  bad[1, -1] = CFG.vocab_size  # a target past the vocabulary: the loss's gather yields NaN
  after, m = step(state, bad[None])
  assert not np.isfinite(float(m["loss"])) and not bool(m["good"])
  assert_unchanged(after, state)
  # A finite batch again, but the run diverged: good stays False and nothing moves.
  final, m = step(after, rows(seed=2)[None])
  assert np.isfinite(float(m["loss"])) and not bool(m["good"])
  assert_unchanged(final, state)


def test_an_update_that_overflows_the_parameters_is_not_applied():
  # Finite loss and gradients, but a rate past float32's range (1e39 is inf there): the
  # parameters it makes are not finite.
  state, step = compile_step(optax.inject_hyperparams(optax.sgd)(learning_rate=1e39))
  after, m = step(state, rows()[None])
  assert np.isfinite(float(m["loss"])) and np.isfinite(float(m["grad_norm"]))
  assert not bool(m["good"])
  assert_unchanged(after, state)
  # The same compiled step at a sane rate is applied: the check is on the result, not the rate.
  sane = state["opt_state"]._replace(hyperparams={"learning_rate": jnp.float32(1e-2)})
  after, m = step({**state, "opt_state": sane}, rows()[None])
  assert bool(m["good"]) and int(after["step"]) == 1


def test_clipping_uses_the_global_norm_of_the_gradients_and_matches_optax():
  t = train_settings(grad_clip=0.05)  # well below the initial norm: clipping is active
  state, step = compile_step(step_lib.make_optimizer(t))
  batch = rows()
  new, m = step(state, batch[None])
  reference = optax.chain(optax.clip_by_global_norm(0.05),
                          optax.adamw(schedule_lib.for_config(t), b1=t.b1, b2=t.b2, eps=t.eps,
                                      weight_decay=t.weight_decay, mask=step_lib.decay_mask))

  @jax.jit
  def reference_step(params):  # written out with optax alone (one compile, not op by op)
    grads = jax.grad(model.loss_fn)(params, batch[:, :-1], batch[:, 1:], CFG)
    updates, opt_state = reference.update(grads, reference.init(params), params)
    return optax.tree.norm(grads), {"params": optax.apply_updates(params, updates),
                                    "opt_state": opt_state}

  norm, expected = reference_step(state["params"])
  opt_state = expected["opt_state"]
  assert float(norm) > 0.05
  np.testing.assert_allclose(m["grad_norm"], norm, rtol=1e-5)
  assert jax.tree.structure(new["opt_state"]) == jax.tree.structure(opt_state)
  # The moments carry the clipped gradient's scale (Adam's first step alone does not);
  # tolerance per leaf as in the accumulation test (jit vs eager rounding near zero).
  for a, b in zip(jax.tree.leaves({k: new[k] for k in expected}), jax.tree.leaves(expected)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-3 * float(np.max(np.abs(b))))


def test_clip_by_global_norm_keeps_optax_state_structure_and_math():
  grads = {"a": jnp.arange(4.0), "b": jnp.ones((2, 3))}
  ours, theirs = step_lib.clip_by_global_norm(1.0), optax.clip_by_global_norm(1.0)
  assert jax.tree.structure(ours.init(grads)) == jax.tree.structure(theirs.init(grads))
  expected, _ = theirs.update(grads, theirs.init(grads))
  for given in (None, optax.tree.norm(grads)):
    got, _ = ours.update(grads, ours.init(grads), grad_norm=given)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
      np.testing.assert_allclose(a, b, rtol=1e-6)


def test_clipping_uses_the_norm_it_is_given():
  # The step hands its gradient norm to the clipping, which must scale by it (and not by a
  # norm of its own): a given norm twice the true one clips to half the size.
  grads = {"a": jnp.arange(4.0), "b": jnp.ones((2, 3))}
  true = optax.tree.norm(grads)
  clip = step_lib.clip_by_global_norm(1.0)
  got, _ = clip.update(grads, clip.init(grads), grad_norm=2 * true)
  for a, g in zip(jax.tree.leaves(got), jax.tree.leaves(grads)):
    np.testing.assert_allclose(a, g / (2 * true), rtol=1e-6)
  unclipped, _ = clip.update(grads, clip.init(grads), grad_norm=jnp.float32(0.5))
  for a, g in zip(jax.tree.leaves(unclipped), jax.tree.leaves(grads)):
    np.testing.assert_array_equal(a, g)  # under the threshold: untouched


def test_z_loss_is_optimised_and_logged_apart_from_the_loss(adam):
  _, optimizer, state, plain_step = adam  # z_loss's default, 0
  batch = rows()
  z_step = jax.jit(functools.partial(step_lib.train_step, cfg=CFG, optimizer=optimizer, z_loss=0.5))
  (plain, m0), (with_z, m1) = plain_step(state, batch[None]), z_step(state, batch[None])
  assert "z_loss" not in m0  # off by default, and not logged
  # "loss" stays the cross-entropy; the z-loss term is its own metric ...
  np.testing.assert_allclose(m1["loss"], m0["loss"], rtol=1e-6)
  _, terms = jax.jit(model.loss_terms, static_argnums=(3, 5))(state["params"], batch[:, :-1],
                                                              batch[:, 1:], CFG, None, 0.5)
  np.testing.assert_allclose(m1["loss"], terms["nll"], rtol=1e-6)
  np.testing.assert_allclose(m1["z_loss"], terms["z_loss"], rtol=1e-6)
  # ... and its gradient is in the update: Adam's moments (its first step alone is blind to
  # a gradient's scale) differ from the cross-entropy's.
  assert not all(np.allclose(a, b) for a, b in zip(jax.tree.leaves(with_z["opt_state"]),
                                                   jax.tree.leaves(plain["opt_state"])))


def mup_updates(t, grads_of, **mup_changes):
  """One update of sp and muP (base width 4 of 16: r = 1/4) from the same params and grads."""
  mup = model.ModelConfig(**{**CFG.__dict__, "parametrization": "mup", "base_width": 4,
                             "qk_norm": True, **mup_changes})
  sp = model.ModelConfig(**{**CFG.__dict__, "qk_norm": True})
  params = jax.jit(model.init_params, static_argnums=0)(mup, jax.random.key(0))
  grads = grads_of(params)
  updates = {}
  for name, cfg in (("sp", sp), ("mup", mup)):
    opt = step_lib.make_optimizer(t, cfg)
    updates[name], _ = jax.jit(opt.update)(grads, opt.init(params), params)
  return updates


def by_leaf(updates, want):
  """Each muP update against ``want(is_hidden) x`` sp's, leaf by leaf."""
  hidden = {"w_qkv", "w_out", "w_in"}
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(updates["mup"]),
                          jax.tree.leaves(updates["sp"])):
    factor = want(path[0].key == "blocks" and path[-1].key in hidden)
    np.testing.assert_allclose(a, factor * b, rtol=1e-6, atol=1e-12, err_msg=jax.tree_util.keystr(path))


def any_grads(params):
  return jax.tree.map(lambda a: jnp.asarray(np.random.default_rng(a.size).normal(size=a.shape),
                                            jnp.float32), params)


@pytest.mark.parametrize("decay", ["constant", "with_rate"])
def test_mup_scales_the_adam_step_of_the_hidden_matrices_alone(decay):
  # Without weight decay both rules are the same: Adam's step of a hidden matrix times r.
  updates = mup_updates(train_settings(weight_decay=0.0), any_grads, mup_decay=decay)
  by_leaf(updates, lambda hidden: 4 / 16 if hidden else 1.0)


def test_mup_decay_keeps_rate_times_decay_constant_as_mupadamw_or_scales_it_with_the_rate():
  # Zero gradients: Adam's step is 0, the update is the decay alone, -lr x weight_decay x p.
  # mup.MuAdamW (decoupled_wd=False) divides a hidden matrix's rate by the width multiplier
  # and multiplies its decay by it: the same shrinkage at every width, sp's ("constant").
  # MuAdamW(decoupled_wd=True) keeps the decay: the shrinkage falls with the rate ("with_rate").
  t, zeros = train_settings(weight_decay=0.1), lambda params: jax.tree.map(jnp.zeros_like, params)
  constant = mup_updates(t, zeros, mup_decay="constant")
  by_leaf(constant, lambda hidden: 1.0)
  w_in = constant["sp"]["blocks"]["mlp"]["w_in"]
  assert float(jnp.max(jnp.abs(w_in))) > 0  # the decay did act
  by_leaf(mup_updates(t, zeros, mup_decay="with_rate"), lambda hidden: 4 / 16 if hidden else 1.0)


def test_mup_at_its_base_width_updates_as_sp():
  # r = 1: the same update as sp under either decay rule, to the last bit, with decay on.
  t = train_settings(weight_decay=0.1)
  sp = model.ModelConfig(**{**CFG.__dict__, "readout_multiplier": 2.0})
  params = jax.jit(model.init_params, static_argnums=0)(sp, jax.random.key(0))
  grads = any_grads(params)
  want, _ = jax.jit(step_lib.make_optimizer(t, sp).update)(grads, step_lib.make_optimizer(t, sp).init(params), params)
  for decay in ("constant", "with_rate"):
    mup = model.ModelConfig(**{**sp.__dict__, "parametrization": "mup", "base_width": sp.d_model,
                               "mup_decay": decay})
    opt = step_lib.make_optimizer(t, mup)
    got, _ = jax.jit(opt.update)(grads, opt.init(params), params)
    chex.assert_trees_all_equal(got, want)


def test_a_negative_z_loss_is_refused():
  with pytest.raises(ValueError, match=r"train.z_loss=-0.1: expected 0 \(off\) or a positive"):
    train_settings(z_loss=-0.1)


# ----------------------------------------------------------------------------- Muon

def is_dims(x):
  return x is None or isinstance(x, optax.contrib.MuonDimensionNumbers)


def first_update(t, grads_of):
  """The first update of ``t``'s optimizer (``step.make_optimizer``) from CFG's initial
  parameters: ``(params, grads, updates)``."""
  params = jax.jit(model.init_params, static_argnums=0)(CFG, jax.random.key(0))
  grads = grads_of(params)
  opt = step_lib.make_optimizer(t, CFG)
  updates, _ = jax.jit(opt.update)(grads, opt.init(params), params)
  return params, grads, updates


def leaf(path, tree):
  return functools.reduce(lambda node, k: node[k.key], path, tree)


def qkv_apart(w_LDE):
  """Q, K and V of a fused ``[.., in, 3 out]`` matrix: the column blocks the model splits."""
  return jnp.split(w_LDE, 3, axis=-1)


@pytest.mark.parametrize("split_qkv", [True, False], ids=["qkv-apart", "qkv-fused"])
@pytest.mark.parametrize("consistent_rms", [0.2, 0.0])
def test_muon_orthogonalises_each_layer_and_q_k_v_apart_as_optax_does_one_matrix(
    consistent_rms, split_qkv):
  # Each hidden matrix [layers, in, out] against optax's Muon called on one layer's [in, out]
  # matrix at a time: equal only if the layer axis is a batch axis, not folded into a
  # matrix dimension (which would orthogonalise the layers together and mix them). The fused
  # QKV matrix: each of Q, K and V alone (modded-nanogpt's), or the three as one (the option).
  # At rate 1 the updates are of order 0.1 to 1: the tolerance is about float32's rounding.
  t = train_settings(optimizer="muon", grad_clip=0.0, weight_decay=0.1, learning_rate=1.0,
                     muon_consistent_rms=consistent_rms, muon_split_qkv=split_qkv)
  params, grads, updates = first_update(t, any_grads)
  one_matrix = optax.contrib.muon(t.learning_rate, beta=t.muon_momentum, eps=t.eps,
                                  weight_decay=0.1, consistent_rms=consistent_rms or None)
  hidden = step_lib.muon_dimension_numbers(params)
  seen = 0
  for path, dims in jax.tree_util.tree_leaves_with_path(hidden, is_leaf=is_dims):
    if dims is None:
      continue
    parts = qkv_apart if split_qkv and path[-1].key == "w_qkv" else lambda x: [x]
    for layer in range(CFG.n_layer):
      matrices = (parts(leaf(path, tree)[layer]) for tree in (params, grads, updates))
      for i, (w, g, u) in enumerate(zip(*matrices)):
        want, _ = one_matrix.update({"w": g}, one_matrix.init({"w": w}), {"w": w})
        np.testing.assert_allclose(u, want["w"], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{jax.tree_util.keystr(path)} layer {layer} part {i}")
    seen += 1
  assert seen == 4  # QKV, attention out, MLP in and out


def test_muon_takes_the_hidden_matrices_and_adam_the_rest():
  params = jax.eval_shape(lambda k: model.init_params(CFG, k), jax.random.key(0))
  dims = step_lib.muon_dimension_numbers(params)
  assert dims["blocks"]["attn"]["w_qkv"] == optax.contrib.MuonDimensionNumbers(1, 2)
  assert dims["blocks"]["mlp"]["w_out"] == optax.contrib.MuonDimensionNumbers(1, 2)
  for adam in (dims["wte"], dims["wpe"], dims["ln_f"]["scale"], dims["blocks"]["attn"]["b_qkv"],
               dims["blocks"]["ln_1"]["scale"]):
    assert adam is None
  # Seen as Q, K and V, [layers, in, 3, out]: the layer and the three are batch axes.
  viewed = jax.eval_shape(lambda p: step_lib.qkv_view(p, True), params)
  assert viewed["blocks"]["attn"]["w_qkv"].shape == (CFG.n_layer, 16, 3, 16)
  assert step_lib.muon_dimension_numbers(viewed)["blocks"]["attn"]["w_qkv"] == (
      optax.contrib.MuonDimensionNumbers(1, 3))
  assert set(step_lib.MUON_MATRICES) <= set(step_lib.DECAYED)  # Muon's own decay is unmasked


def test_q_k_v_apart_keep_the_fused_forms_state_so_a_checkpoint_reads_either_way():
  params = jax.eval_shape(lambda k: model.init_params(CFG, k), jax.random.key(0))
  optimizers = [step_lib.make_optimizer(train_settings(optimizer="muon", muon_split_qkv=split))
                for split in (True, False)]
  states = [jax.eval_shape(o.init, params) for o in optimizers]
  chex.assert_trees_all_equal_shapes_and_dtypes(*states)
  assert jax.tree.structure(states[0]) == jax.tree.structure(states[1])


def zero_grads(params):
  return jax.tree.map(jnp.zeros_like, params)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_both_optimizers_decay_the_leaves_of_one_table_and_nothing_else(optimizer):
  # Zero gradients: every optimizer step (Adam's, Muon's orthogonalised one) is 0 and the
  # update is the decay alone: -rate x weight_decay x W on the leaves step.DECAYED names (the
  # matrices and embeddings; Muon's Adam branch at its own rate), nothing on norms and biases.
  t = train_settings(optimizer=optimizer, grad_clip=0.0, weight_decay=0.1, adam_lr_ratio=0.5)
  params, _, updates = first_update(t, zero_grads)
  decayed = set()
  for (path, u), p in zip(jax.tree_util.tree_leaves_with_path(updates), jax.tree.leaves(params)):
    muon_matrix = optimizer == "muon" and path[0].key == "blocks" and path[-1].key in (
        step_lib.MUON_MATRICES)
    rate = t.learning_rate * (0.5 if optimizer == "muon" and not muon_matrix else 1.0)
    want = -rate * 0.1 * p if path[-1].key in step_lib.DECAYED else jnp.zeros_like(p)
    np.testing.assert_allclose(u, want, rtol=1e-6, atol=1e-12, err_msg=jax.tree_util.keystr(path))
    decayed |= {path[-1].key} if np.any(u != 0) else set()
  assert decayed == set(step_lib.decayed(t)) - {"lm_head"}  # CFG's head is wte (tied)


def test_muons_adam_branch_is_optax_adamw_with_decay_on_the_embeddings_alone():
  # The Adam branch leaf by leaf against optax.adamw (Nesterov, as optax's Muon branch runs it)
  # called on that leaf alone: with AdamW's decay on wte and wpe, without it on a norm gain
  # and a bias; a run from before muon_adam_decay: no decay anywhere on the branch.
  for adam_decay in (True, False):
    t = train_settings(optimizer="muon", grad_clip=0.0, weight_decay=0.1, adam_lr_ratio=0.5,
                       muon_adam_decay=adam_decay)
    params, grads, updates = first_update(t, any_grads)
    for keys in (("wte",), ("wpe",), ("ln_f", "scale"), ("blocks", "attn", "b_qkv")):
      get = lambda tree: functools.reduce(lambda node, k: node[k], keys, tree)
      decays = adam_decay and keys[-1] in step_lib.DECAYED
      alone = optax.adamw(0.5 * t.learning_rate, b1=t.b1, b2=t.b2, eps=t.eps, nesterov=True,
                          weight_decay=0.1 if decays else 0.0)
      want, _ = alone.update({"x": get(grads)}, alone.init({"x": get(params)}), {"x": get(params)})
      np.testing.assert_allclose(get(updates), want["x"], rtol=1e-6, atol=1e-12,
                                 err_msg=f"{keys} muon_adam_decay={adam_decay}")


def test_the_optimizer_line_names_the_decayed_leaves_and_how_qkv_is_orthogonalised():
  line = step_lib.describe_training(train_settings(optimizer="muon"))
  assert ("muon on the hidden matrices (Q, K and V apart; momentum 0.95, update RMS 0.2), Adam "
          "at 1x the rate on the rest, weight decay 0.1 on w_qkv, w_out, w_in, wte, wpe, "
          "lm_head, clipped at global norm 1; ") in line
  old = step_lib.describe_training(train_settings(optimizer="muon", muon_split_qkv=False,
                                                  muon_adam_decay=False))
  assert "(QKV as one matrix; " in old and "weight decay 0.1 on w_qkv, w_out, w_in, clipped" in old
  assert "weight decay 0.1 on w_qkv, w_out, w_in, wte, wpe, lm_head, clipped" in (
      step_lib.describe_training(train_settings()))


def test_the_adam_branch_of_muon_steps_at_its_own_rate():
  updates = {ratio: first_update(train_settings(optimizer="muon", adam_lr_ratio=ratio,
                                               grad_clip=0.0), any_grads)[2] for ratio in (1.0, 0.25)}
  np.testing.assert_allclose(updates[0.25]["wte"], 0.25 * updates[1.0]["wte"], rtol=1e-6)
  np.testing.assert_array_equal(updates[0.25]["blocks"]["attn"]["w_qkv"],
                                updates[1.0]["blocks"]["attn"]["w_qkv"])


@pytest.mark.parametrize("field, value", [
    ("optimizer", "sgd"), ("adam_lr_ratio", 0.0), ("muon_momentum", 1.0),
    ("muon_consistent_rms", -0.2)])
def test_a_bad_muon_setting_is_one_line_naming_it(field, value):
  with pytest.raises(ValueError, match=rf"^train\.{field}={value!r}: expected"):
    train_settings(**{field: value})
