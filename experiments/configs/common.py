"""Shared pieces of the named configs: the default groups and the variant parser.

Every named config (``andrea120m.py``, ``tiny.py``, ...) calls ``base_config`` with its
model shape and then ``apply_variants`` with the ``arg`` of ``get_config(arg)``, so
``--config=andrea120m:norm=post,mlp_ratio=2`` works for every config the same way.
"""

from __future__ import annotations

import ast
import re

import ml_collections

from andrea_jax import errors
from andrea_jax import file_formats
from andrea_jax import recipes


def model_group(*, vocab_size: int, block_size: int, d_model: int, n_layer: int,
                n_head: int) -> ml_collections.ConfigDict:
  """The ``model`` group; its fields are exactly ``andrea_jax.model_config.ModelConfig``'s."""
  m = ml_collections.ConfigDict()
  # Vocabulary size: 256 byte tokens + learned BPE merges + 1 end-of-text token.
  m.vocab_size = vocab_size
  # Context length (rows of the learned position table; the longest sequence a rotary model sees).
  m.block_size = block_size
  # Width of the residual stream.
  m.d_model = d_model
  # Number of transformer blocks (stacked and walked with lax.scan).
  m.n_layer = n_layer
  # Attention heads; d_model must be divisible by n_head.
  m.n_head = n_head
  # MLP hidden width = round(mlp_ratio * d_model).
  m.mlp_ratio = 4.0
  # Norm placement: "pre" (GPT-2), "post", "peri" (Peri-LN), "reordered" (OLMo 2), "deepnorm", "mix" (Mix-LN); docs/model.md.
  m.norm = "pre"
  # What normalises: "layernorm", "rmsnorm" (Zhang & Sennrich 2019) or "dyt" (Zhu et al. 2025).
  m.norm_type = "layernorm"
  # DyT's initial alpha, the learned scalar in scale * tanh(alpha x) + bias (the paper's 0.5).
  m.dyt_alpha_init = 0.5
  # DyT's alpha_0 on the attention sublayer's norms (Zhu et al.'s LLaMA attn_alpha_init_value; 0 = dyt_alpha_init).
  m.dyt_alpha_attn_init = 0.0
  # DyT's alpha_0 on the final norm (Zhu et al.'s LLaMA dec_alpha_init_value; 0 = dyt_alpha_init).
  m.dyt_alpha_final_init = 0.0
  # A norm of norm_type on the embedding output, params["ln_emb"] (OLMo-core's embedding_norm).
  m.embedding_norm = False
  # The final norm's type (ln_f): "" = norm_type's, else "layernorm", "rmsnorm" or "dyt".
  m.final_norm_type = ""
  # Init std of the token embedding wte (GPT-2's 0.02; OLMo-core's llama init: 1.0).
  m.embedding_init_std = 0.02
  # Init std of an untied head lm_head (GPT-2's 0.02; OLMo-core's llama init: d_model ** -0.5).
  m.head_init_std = 0.02
  # Mix-LN (norm="mix"): fraction of the blocks, from the first, that are post-LN (the paper's 0.25).
  m.mix_post_fraction = 0.25
  # LayerNorm scaling (Sun et al. 2025; norm="pre" only): each pre-norm output / sqrt(layer index).
  m.norm_depth_scaling = False
  # Weight init: "gpt2" (N(0, 0.02), residual projections / sqrt(2 n_layer)), "xavier" (Glorot normal) or "auto" (xavier under deepnorm, else gpt2).
  m.init = "auto"
  # MLP activation: "gelu_tanh" (GPT-2), "gelu" (exact erf), "relu", "relu2" (ReLU squared, So et al. 2021) or "swiglu" (gated).
  m.activation = "gelu_tanh"
  # Tie the unembedding to the token embedding (GPT-2 style).
  m.tie_embeddings = True
  # LayerNorm epsilon.
  m.ln_eps = 1e-5
  # Dtype the parameters are stored in.
  m.param_dtype = "float32"
  # Dtype of matmuls and activations (norms, softmax: float32); "auto": bf16 on GPUs, else f32.
  m.compute_dtype = "float32"
  # Recompute in the backward ("none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable"); "auto": none on GPUs, the last on CPUs.
  m.remat_policy = "auto"
  # Layers unrolled per lax.scan iteration (1 = pure scan).
  m.scan_unroll = 1
  # "xla_flash", "xla", "cudnn" (see attention.py) or "auto" (cudnn on NVIDIA GPUs, else xla_flash).
  m.attention_impl = "auto"
  # Queries per block in the XLA path's blocked causal attention (skips the masked half).
  m.attention_block = 128
  # Pad the vocabulary to a multiple of this (128 aligns GPU matmuls; 1 = none); never sampled.
  m.vocab_pad_multiple = 1
  # Rows per chunk of the fused unembedding + cross-entropy (0 = all logits at once).
  m.loss_chunk = 0
  # LayerNorm on each head's queries and keys before their dot product (Dehghani et al. 2023).
  m.qk_norm = False
  # "sp" (standard, GPT-2) or "mup" (muP for Adam: andrea_jax/mup.py; needs base_width).
  m.parametrization = "sp"
  # muP's base width: the d_model whose tuned learning rate transfers (0 = unset; "sp" ignores it).
  m.base_width = 0
  # The base model's output-logit multiplier (andrea_jax/mup.py: tuned at the base width; 1 = none).
  m.readout_multiplier = 1.0
  # The base model's attention-score multiplier, under sp and muP alike (1 = none).
  m.attention_multiplier = 1.0
  # The base model's multiplier on the token plus position embeddings (1 = none).
  m.embedding_multiplier = 1.0
  # muP's attention scale: "base" (sqrt(d_head at base_width) / d_head) or "inverse" (1 / d_head).
  m.mup_attention = "base"
  # muP's hidden decay: "constant" (lr x decay fixed across width, mup.MuAdamW) or "with_rate".
  m.mup_decay = "constant"
  # Start the query projection at zero (the mup package's advice; any parametrisation).
  m.zero_query_init = False
  # muP's head count at the base width (0 = n_head, held fixed across widths; d_head 64 at any width: base_width / 64).
  m.base_n_head = 0
  # Depth rule: "none" or "completep" (each residual branch x base_depth / n_layer; andrea_jax/mup.py).
  m.depth_rule = "none"
  # The depth rule's base depth: the n_layer whose learning rate transfers (0 = unset).
  m.base_depth = 0
  # Dropout in training (nanoGPT's: embeddings, attention probabilities, each block's two outputs); 0 = off.
  m.dropout = 0.0
  # Positions: "learned" (a wpe table, GPT-2) or "rope" (rotary q and k, Su et al. 2021; no wpe).
  m.position = "learned"
  # RoPE's base: pair i of a head turns by position * rope_base^(-2i / head_dim).
  m.rope_base = 10000.0
  # Biases in every linear layer and norm (False: none, nanoGPT's bias=False; GPT-2 export needs True).
  m.bias = True
  return m


def base_config(model: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A full experiment config around a model group.

  Each group is one typed group of ``andrea_jax.config.RunConfig``, which the library
  reads below ``train.train_and_evaluate``: a group or field added here is added there too
  (``tests/test_config.py`` checks that every named config round-trips).
  """
  config = ml_collections.ConfigDict()
  # The model shape and variant (becomes a frozen andrea_jax.model_config.ModelConfig).
  config.model = model
  # Where the text comes from and how it is tokenized and split.
  config.data = data_group(model.vocab_size)
  # One vocabulary size: overriding model.vocab_size also resizes the tokenizer.
  config.data.vocab_size = config.model.get_ref("vocab_size")
  # Optimisation, schedule, evaluation and logging.
  config.train = train_group()
  # Orbax checkpoints in <workdir>/checkpoints.
  config.checkpoint = checkpoint_group()
  # Samples printed at the end of a run.
  config.sample = sample_group()
  # Per-layer gradient, activation and update norms (andrea_jax/diagnostics.py).
  config.diagnostics = diagnostics_group()
  # The device grid: data parallel and FSDP axes (andrea_jax/sharding.py).
  config.mesh = mesh_group()
  # Several processes (hosts) training together through jax.distributed.
  config.distributed = distributed_group()
  return config


def mesh_group() -> ml_collections.ConfigDict:
  """The ``mesh`` group: how the devices form the ("data", "fsdp") grid; data * fsdp = devices."""
  m = ml_collections.ConfigDict()
  # Data-parallel replicas; -1 = all devices left over by the other axis.
  m.data = -1
  # Devices that shard the parameters and optimizer state (FSDP); 1 = replicate them.
  m.fsdp = 1
  return m


def distributed_group() -> ml_collections.ConfigDict:
  """The ``distributed`` group: jax.distributed.initialize for multi-process runs (docs/scaling.md)."""
  d = ml_collections.ConfigDict()
  # Call jax.distributed.initialize before training (one process per host or per GPU).
  d.enabled = False
  # host:port of process 0; empty = let JAX detect the cluster (SLURM, Open MPI, TPU).
  d.coordinator_address = ""
  # Number of processes, with an explicit coordinator_address.
  d.num_processes = 1
  # This process's index in 0..num_processes-1, with an explicit coordinator_address.
  d.process_id = 0
  return d


def diagnostics_group() -> ml_collections.ConfigDict:
  """The ``diagnostics`` group: per-layer norms written to diagnostics.jsonl."""
  d = ml_collections.ConfigDict()
  # Record diagnostics at all (off by default: each probe costs a forward and backward pass).
  d.enabled = False
  # Probe norms, attention-logit maxima, output log Z and RMS at step 0, every this many steps, the last.
  d.every = 50
  # Record |delta W| / |W| per layer for each of the first this many updates.
  d.early_steps = 10
  return d


def train_group() -> ml_collections.ConfigDict:
  """The ``train`` group: AdamW or Muon, warmup + cosine or WSD schedule, clipping, batches, logging."""
  t = ml_collections.ConfigDict()
  # Seed of parameter initialisation (the batch order follows data.shuffle_seed).
  t.seed = 0
  # Optimizer updates to run in total.
  t.steps = 5000
  # Sequences per optimizer update (global, over all devices and microbatches).
  t.batch_size = 32
  # Microbatches per update; gradients are summed over them (for batches larger than memory).
  t.grad_accum_steps = 1
  # Peak learning rate, reached at the end of warmup.
  t.learning_rate = 6e-4
  # Linear warmup over this many updates, from above zero: (k + 1) / (warmup_steps + 1) of the peak.
  t.warmup_steps = 200
  # The decay after the warmup: "cosine" (to the floor at the last step) or "wsd" (warmup-stable-decay: the peak, then a decay over the last decay_fraction of the steps; docs/training.md).
  t.schedule = "cosine"
  # The floor both schedules decay to, learning_rate * min_lr_ratio at the last step.
  t.min_lr_ratio = 0.1
  # WSD's decay: "linear", "cosine" or "1-sqrt" (1 - sqrt(progress), Hägele et al. 2024's best).
  t.decay_shape = "1-sqrt"
  # WSD's decay lasts this fraction of train.steps (0 = none: the peak to the end; Hägele et al. 2024: 0.2).
  t.decay_fraction = 0.2
  # "adamw", or "muon" (optax.contrib.muon: the hidden matrices orthogonalised, the rest by Adam; docs/training.md).
  t.optimizer = "adamw"
  # Muon only: the Adam branch's peak rate (embeddings, head, norms, biases) as a multiple of learning_rate.
  t.adam_lr_ratio = 1.0
  # Muon only: the momentum of its Nesterov update (Jordan 2024: 0.95).
  t.muon_momentum = 0.95
  # Muon only: scale each update to this RMS (Liu et al. 2025, so AdamW's rate and decay carry over; 0 = Jordan's sqrt(max(1, fan_out / fan_in))).
  t.muon_consistent_rms = 0.2
  # Muon only: orthogonalise each layer's Q, K and V as three matrices (modded-nanogpt's), not the fused QKV as one.
  t.muon_split_qkv = True
  # Muon only: its Adam branch decays the embeddings and head as AdamW does (step.DECAYED; False: no decay on it).
  t.muon_adam_decay = True
  # AdamW first-moment decay (and Muon's Adam branch's).
  t.b1 = 0.9
  # AdamW second-moment decay (and Muon's Adam branch's).
  t.b2 = 0.95
  # AdamW epsilon.
  t.eps = 1e-8
  # Decoupled weight decay, times the rate, on the matrices and embeddings (step.DECAYED), under AdamW and Muon alike.
  t.weight_decay = 0.1
  # Clip the global gradient norm to this value (0 = no clipping).
  t.grad_clip = 1.0
  # Weight of PaLM's z-loss, z_loss * log(Z)^2 on the softmax normaliser (0 = off; PaLM: 1e-4).
  t.z_loss = 0.0
  # Log train metrics every this many updates.
  t.log_every = 10
  # Evaluate on the fixed validation batches every this many updates (and at the end).
  t.eval_every = 250
  # Number of fixed validation batches (of batch_size sequences) per evaluation.
  t.eval_batches = 8
  # A Hugging Face GPT-2 directory whose weights start a fresh run ("" = random init; docs/interop.md).
  t.init_from = ""
  # Evaluate at step 0, before training (off for the real models: an hour on a CPU).
  t.eval_at_start = True
  # Weights & Biases too (pip install wandb): "off", "offline" (<workdir>/wandb; wandb sync uploads) or "online".
  t.wandb_mode = "off"
  # The W&B project the run is logged to.
  t.wandb_project = "andrea_jax"
  # The W&B run name ("" = the workdir's name; a group's members: theirs, in a W&B group of this name).
  t.wandb_name = ""
  # Trace these updates with jax.profiler into <workdir>/profile for TensorBoard, "first-last" such as "10-12" ("" = off; docs/training.md).
  t.profile_steps = ""
  # Score HellaSwag every this many updates, logged to metrics.jsonl (0 = off; andrea_jax/tasks.py).
  t.task_eval_every = 0
  # HellaSwag's JSONL ("" = download hellaswag_val.jsonl into ~/.cache/andrea_jax once).
  t.task_file = ""
  # Score the first this many HellaSwag examples (0 = all 10,042: slow on a CPU).
  t.task_examples = 0
  # How HellaSwag is scored: "lmeval" (lm-eval-harness's context, acc_norm per character) or "llmc" (llm.c's; docs/training.md).
  t.task_style = "lmeval"
  return t


def checkpoint_group() -> ml_collections.ConfigDict:
  """The ``checkpoint`` group: when orbax saves and how many it keeps."""
  c = ml_collections.ConfigDict()
  # Save every this many updates, at the end and on SIGTERM/SIGINT (may change on a resume).
  c.every = 500
  # Also save once this many seconds passed since the newest save or this run's start: a kill loses at most this much work (Levanter's save_interval; 0 = by steps alone).
  c.every_seconds = 1800
  # Keep the newest this many checkpoints.
  c.keep = 3
  # Also save and keep these steps, "a,b,..." ("" none): where cooldowns branch off the run (docs/training.md, "Cooldown").
  c.keep_steps = ""
  return c


def sample_group() -> ml_collections.ConfigDict:
  """The ``sample`` group: what the end of a run generates."""
  s = ml_collections.ConfigDict()
  # Samples printed (and saved to samples.txt) at the end of a run (0 = none).
  s.num_samples = 3
  # The prompt the samples continue ("" = start from the end-of-text token).
  s.prompt = "def "
  # New tokens per sample.
  s.max_new_tokens = 64
  # Softmax temperature (0 = greedy).
  s.temperature = 0.8
  # Keep only the k most likely tokens (0 = all).
  s.top_k = 50
  # Nucleus sampling: keep the smallest set of tokens with this much probability.
  s.top_p = 0.95
  return s


def data_group(vocab_size: int) -> ml_collections.ConfigDict:
  """The ``data`` group: corpus source, split, tokenizer and cache locations."""
  d = ml_collections.ConfigDict()
  # A text, JSONL or Parquet file (also .gz/.zst), a glob or a folder of them, a save_to_disk folder; "" = built-in.
  d.path = ""
  # A Hugging Face datasets name or local folder, streamed by load_dataset ("" = data.path or built-in).
  d.hf_dataset = ""
  # The datasets configuration (e.g. "sample-10BT" of HuggingFaceFW/fineweb-edu; "" = default).
  d.hf_config = ""
  # The datasets split read (and the split folder of a saved DatasetDict).
  d.hf_split = "train"
  # The field (JSONL) or column (Parquet, Arrow, datasets) that holds a document's text.
  d.text_field = "text"
  # Existing llm.c token shards to train on (a folder or glob; names with "val" validate); needs tokenizer_path.
  d.shards = ""
  # File extensions read when data.path is a folder ("*": every file, extensionless too).
  d.extensions = file_formats.EXTENSIONS
  # At most this many documents from the built-in corpus (0 = all of them).
  d.max_docs = 0
  # Share of the corpus held out for validation, by a hash of each block of text (about 8k characters).
  d.val_fraction = 0.05
  # The validation side stops growing at this many bytes of text: small and fixed at any corpus size.
  d.val_max_bytes = 20_000_000
  # Seed of the train/val split and the tokenizer's sample (cache key).
  d.split_seed = 0
  # Seed of the batch order only: runs differing in it share tokenizer and validation set.
  d.shuffle_seed = 0
  # A tokenizer.json to use; empty = train one of model.vocab_size on a sample of the training split.
  d.tokenizer_path = ""
  # The tokenizer trains on at most this many bytes of training text, a seeded sample.
  d.tokenizer_sample_bytes = 200_000_000
  # Tokenizer vocabulary size; must equal model.vocab_size.
  d.vocab_size = vocab_size
  # Tokens per shard file (llm.c's 100 M: no header count overflows, whatever the corpus).
  d.shard_tokens = 100_000_000
  # Encoding processes (0 = this process, the tokenizer's threads on every core).
  d.workers = 0
  # Prepared tokenizer and token shards are cached here, keyed by the corpus's fingerprint.
  d.cache_dir = "runs/cache"
  # What to do with bytes that are not UTF-8: "error" (name file and offset) or "replace".
  d.utf8_errors = "error"
  # Split a data.path text file into documents at this string ("" = one file, one document).
  d.doc_separator = ""
  # Batches the loader prepares ahead in a background thread.
  d.prefetch = 2
  return d


def fit_warmup(config: ml_collections.ConfigDict) -> str | None:
  """A run no longer than its warmup warms up over a tenth of its steps; returns a note."""
  t = config.train
  if not 0 < t.steps <= t.warmup_steps:
    return None
  configured, t.warmup_steps = t.warmup_steps, t.steps // 10
  return (f"train.warmup_steps={configured} is not below train.steps={t.steps}: warming up "
          f"over {t.warmup_steps} steps (a tenth of the run); set "
          f"--config.train.warmup_steps to choose")


def parse_variants(arg: str | None) -> dict:
  """Parse ``"norm=post,mlp_ratio=2"`` into ``{"norm": "post", "mlp_ratio": 2}``."""
  if not arg:
    return {}
  out = {}
  for item in arg.split(","):
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
      raise errors.ConfigError(f"config variant {item!r} is not of the form key=value "
                               f"(e.g. 'norm=post,mlp_ratio=2')")
    try:
      value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
      value = raw.strip()
    out[key.strip()] = value
  return out


def apply_variants(config: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
  """Apply ``key=value`` variants; bare keys address ``model``, dotted keys any group.

  ``recipe=NAME`` (``andrea_jax/recipes.py``) sets that recipe's model fields first; the other
  variants then override them, and a derived field (Gemma's ``sqrt(d_model)``) is computed
  last from the model group, unless a variant set it.
  """
  variants = parse_variants(arg)
  name = variants.pop("recipe", None)
  if name is None:
    return apply_overrides(config, variants)
  fields = recipes.recipe(str(name))
  apply_overrides(config, {k: f.value for k, f in fields.items()
                           if not isinstance(f.value, recipes.Derived)})
  apply_overrides(config, variants)
  set_here = {k if "." in k else f"model.{k}" for k in variants}
  return apply_overrides(config, {k: f.value(config.model) for k, f in fields.items()
                                  if isinstance(f.value, recipes.Derived) and f"model.{k}" not in set_here})


def apply_overrides(config: ml_collections.ConfigDict, overrides: dict) -> ml_collections.ConfigDict:
  """Set ``{"group.field": value}`` (bare keys address ``model``) in place and return ``config``.

  ml_collections does the work: ``update_from_flattened_dict`` on the locked config refuses
  unknown keys and values of the wrong type (ints widen to floats). A refusal is a
  ``ConfigError`` naming the override, with ml_collections' "did you mean" suggestion.
  """
  was_locked = config.is_locked
  config.lock()
  try:
    for key, value in overrides.items():
      path = key if "." in key else f"model.{key}"
      try:
        config.update_from_flattened_dict({path: value})
      except KeyError:
        raise errors.ConfigError(f"config override {key}={value!r}: "
                                 f"{unknown_field(config, path)}") from None
      except TypeError:  # ml_collections: "Could not override field ... cannot be casted"
        raise errors.ConfigError(f"config override {key}={value!r}: "
                                 f"{expected_value(field_value(config, path))}") from None
  finally:
    if not was_locked:
      config.unlock()
  return config


def field_value(config: ml_collections.ConfigDict, path: str):
  """The value of the dotted field ``path`` (``"train.steps"``) of ``config``."""
  for part in path.split("."):
    config = config[part]
  return config


def expected_value(example) -> str:
  """What a field holding ``example`` takes, in words: ``expected a number (float), e.g. 4.0``."""
  kinds = {bool: "True or False", int: "a whole number (int)", float: "a number (float)",
           str: "text (str)"}
  kind = kinds.get(type(example), f"a value of type {type(example).__name__}")
  return f"expected {kind}, e.g. {example!r}"


def unknown_field(config: ml_collections.ConfigDict, path: str) -> str:
  """Why ``path`` names no field of ``config``, with ml_collections' suggestion if it has one."""
  node, parts = config, path.split(".")
  for i, part in enumerate(parts):
    where = ".".join(parts[:i]) or "the config"
    if not isinstance(node, ml_collections.ConfigDict):
      return f"{where} is {node!r}, not a group of fields"
    try:
      node = node[part]
    except KeyError as e:  # a locked ConfigDict's message ends with 'Did you mean "x" ...?'
      hint = re.search(r'Did you mean "([^"]+)"', str(e))
      return (f"{where} has no field {part!r}; " +
              (f"did you mean {hint[1]!r}?" if hint else f"its fields are {sorted(node.keys())}"))
  return f"{path} cannot be set"
