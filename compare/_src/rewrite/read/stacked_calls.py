"""Call sites that keep pmap's stacked `[devices, ...]` layout, as the
first step's report names them, and the calls jax 0.10 removed that made
such arrays, which the first step rewrites (`rewrite_helpers.PUT_HELPER`).
"""

# Each kept call's advice, by the call's last name.
STACKED_CALLS = {
    "replicate": "the state copied per device: place it once with "
                 "jax.device_put(x, NamedSharding(mesh, P())) "
                 "(docs/MIGRATION.md#idiom-map)",
    "unreplicate": "one device's copy read back: the value itself once the "
                   "state is placed on the mesh (docs/MIGRATION.md"
                   "#trap-unreplicate)",
    "shard": "the batch reshaped to [devices, ...]: place each process's "
             "rows as the global batch with jax.make_array_from_process_"
             "local_data(NamedSharding(mesh, P(axis)), rows) "
             "(docs/MIGRATION.md#prefetch)",
    "prefetch_to_device": "batches stacked per device: place each batch's "
                          "rows with jax.make_array_from_process_local_data("
                          "NamedSharding(mesh, P(axis)), rows) "
                          "(docs/MIGRATION.md#prefetch)",
    "local_device_count": "the device count used to split: the mesh's size"}

# jax 0.10 removed these; the first step writes the helper that does what
# each did, and the report says so.
REMOVED_PUTS = {"jax.device_put_replicated": "_pmap_put_replicated",
                "jax.device_put_sharded": "_pmap_put_sharded"}
REMOVED = "removed in jax 0.10:"
# What each helper makes, as the kept call it stands for.
_MAKES = {"_pmap_put_replicated": "replicate", "_pmap_put_sharded": "shard"}

# A `replicate` of the program's own may copy some fields and split others
# (transformers' flax examples: `TrainState.replicate` splits the dropout key
# per device with `shard_prng_key`), so no one placement is advised.
OWN_REPLICATE = ("a replicate of the program's own (transformers' "
                 "TrainState.replicate also splits the dropout key per "
                 "device): place what it copies with P() and what it splits "
                 "with P(axis) (docs/MIGRATION.md#idiom-map)")


def is_flax_replicate(name: str) -> bool:
  """`flax.jax_utils.replicate`, as imported (`jax_utils.replicate`, or
  `replicate` from `flax.jax_utils`)."""
  return name == "replicate" or name.endswith("jax_utils.replicate")


def keeps_stack(name: str, tail: str) -> bool:
  """Whether a call keeps pmap's stacked layout (a `shard` only as
  flax's `common_utils.shard`: a team's own `shard` may be anything)."""
  if tail == "shard":
    return name.endswith("common_utils.shard")
  return tail in STACKED_CALLS


def kept(name: str) -> str:
  """The report's text for a kept call `name` (dotted, as written)."""
  tail = _MAKES.get(name, name.rsplit(".", 1)[-1])
  return f"{name}(...): " + (
      OWN_REPLICATE if tail == "replicate" and name not in _MAKES
      and not is_flax_replicate(name) else STACKED_CALLS[tail])


def removed(name: str) -> str:
  """The report's text for a removed call `name` rewritten to its helper."""
  return (f"{REMOVED} {name}(...) -> {REMOVED_PUTS[name]}(...): the same "
          "stacked array, row i on the i-th device given "
          "(docs/MIGRATION.md#staged)")
