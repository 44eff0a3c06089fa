"""The code `python -m compare.rewrite` adds to a rewritten file, once.

`HELPERS` (always): `_pmap_mesh`, the devices pmap maps over as a 1-D mesh
built once per axis; `_pmap_view`, a step as pmap ran it on one device;
`_pmap_keywords`, the step called as pmap calls it (positional and keyword
arguments); `_pmap_waited`, each call waited for on XLA:CPU.
`STATIC_HELPER` (where a pmap has `static_broadcasted_argnums`):
`_pmap_static`, the static arguments bound into the step.
`PUT_HELPER` (where the file calls `jax.device_put_replicated` or
`jax.device_put_sharded`, which jax 0.10 removed): `_pmap_put_replicated`
and `_pmap_put_sharded`, the same stacked arrays.
"""

HELPERS = '''

# Added by `python -m compare.rewrite`: pmap's stacked layout on a 1-D mesh.
@functools.cache
def _pmap_mesh(axis_name, devices=None):
  """The devices pmap maps over (this process's, or `devices`) as a 1-D mesh
  named after pmap's axis: one per axis and device list."""
  return jax.sharding.Mesh(
      np.asarray(jax.local_devices() if devices is None else devices),
      (axis_name,))


def _pmap_view(fn, in_axes=0, out_axes=0):
  """`fn` as pmap ran it on one device: each mapped argument's block of the
  stacked array without its leading axis of 1, each mapped output with one
  (an axis of None: broadcast, as pmap takes and returns it). Keyword
  arguments are mapped over axis 0, as pmap maps them."""

  def block(tree, axis, take):
    if axis is None:
      return tree
    return jax.tree.map(
        lambda x: x[0] if take else jax.numpy.expand_dims(x, 0), tree)

  def on_device(args, kwargs):
    axes = (in_axes if isinstance(in_axes, (tuple, list))
            else [in_axes] * len(args))
    out = fn(*[block(a, axis, True) for a, axis in zip(args, axes)],
             **block(kwargs, 0, True))
    if not isinstance(out_axes, (tuple, list)):
      return block(out, out_axes, False)
    outs = [block(o, axis, False) for o, axis in zip(out, out_axes)]
    return type(out)(*outs) if hasattr(out, "_fields") else type(out)(outs)

  return on_device


def _pmap_keywords(shard_mapped):
  """The shard_map of `_pmap_view` called as pmap's step is: positional
  arguments (jit's donate_argnums count them) and keyword arguments."""

  def call(*args, **kwargs):
    return shard_mapped(args, kwargs)

  return call


def _pmap_waited(step):
  """`step`, each call waited for where the devices are XLA:CPU's: steps
  with collectives queued unread can deadlock emulated CPU devices (the
  rendezvous aborts after 40 s; pmap's own too). Accelerators keep their
  queue."""

  @functools.wraps(step)
  def waited(*args, **kwargs):
    out = step(*args, **kwargs)
    if jax.default_backend() == "cpu":
      jax.block_until_ready(out)
    return out

  return waited
'''

STATIC_HELPER = '''

def _pmap_static(shard_mapped, fn, static_argnums):
  """pmap's static_broadcasted_argnums: jit hands the static arguments over
  as Python values; they are bound into `fn` and the others mapped."""

  def call(*args, **kwargs):
    static = {i: args[i] for i in static_argnums}

    def bound(*mapped, **mapped_kwargs):
      rest = iter(mapped)
      return fn(*[static[i] if i in static else next(rest)
                  for i in range(len(args))], **mapped_kwargs)

    return shard_mapped(bound)(
        tuple(a for i, a in enumerate(args) if i not in static), kwargs)

  return call
'''

PUT_HELPER = '''

def _pmap_stacked_sharding(devices):
  """Row i of a stacked array on `devices[i]`: pmap's layout over them."""
  return jax.sharding.NamedSharding(
      _pmap_mesh("_pmap_devices", tuple(devices)),
      jax.sharding.PartitionSpec("_pmap_devices"))


def _pmap_put_replicated(x, devices):
  """`jax.device_put_replicated(x, devices)` (removed in jax 0.10): each leaf
  of `x` stacked once per device, row i on `devices[i]`."""
  sharding = _pmap_stacked_sharding(devices)
  return jax.tree.map(lambda leaf: jax.device_put(np.broadcast_to(
      leaf, (len(devices), *np.shape(leaf))), sharding), x)


def _pmap_put_sharded(shards, devices):
  """`jax.device_put_sharded(shards, devices)` (removed in jax 0.10): the
  trees `shards` stacked leaf by leaf, shard i on `devices[i]`."""
  sharding = _pmap_stacked_sharding(devices)
  return jax.tree.map(
      lambda *leaves: jax.make_array_from_single_device_arrays(
          (len(leaves), *np.shape(leaves[0])), sharding,
          [jax.device_put(np.asarray(leaf)[None], device)
           for leaf, device in zip(leaves, devices)]), *shards)
'''


def without_helpers(code: str) -> str:
  """`code` (a rewritten file) without the helpers the rewrite added: the
  program as it reads."""
  for helper in (HELPERS, STATIC_HELPER, PUT_HELPER):
    code = code.replace(helper, "")
  return code
