"""The code `python -m compare.rewrite` adds to a rewritten file, once.

`HELPERS` (always): `_pmap_mesh`, the devices pmap maps over as a 1-D mesh
built once per axis; `_pmap_view`, a step as pmap ran it on one device;
`_pmap_keywords`, the step given pmap's positional and keyword arguments;
`_pmap_call`, the step called as pmap's is on one process or many (each
process's rows in and out), each call waited for on XLA:CPU.
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
  """The devices pmap maps over as a 1-D mesh named after pmap's axis, one
  per axis and device list: `devices`, or every process's devices, each
  process's together and in process order, the order of pmap's axis index
  (a mesh of this process's devices alone would reduce over them alone)."""
  if devices is None:
    devices = [device for process in range(jax.process_count())
               for device in jax.local_devices(process_index=process)]
  return jax.sharding.Mesh(np.asarray(devices), (axis_name,))


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


def _pmap_call(build, fun, axis_name, in_axes=0, devices=None,
               static_argnums=()):
  """The step `build(fun)` makes (jit of shard_map over `_pmap_mesh(
  axis_name, devices)`) called as pmap's step is. Built at the first call,
  as pmap builds its own: after `jax.distributed.initialize`. On many processes
  each hands in, and gets back, the rows of its own devices: the global
  arrays the step's collectives see are made of every process's rows of a
  mapped argument (a broadcast one, in_axes None, is the same on all), and
  a stacked output is read back as this process's rows; a global array goes
  in as it is. Each call is waited for where the devices are XLA:CPU's:
  steps with collectives queued unread can deadlock emulated CPU devices
  (the rendezvous aborts after 40 s; pmap's own too)."""
  from jax.experimental import multihost_utils

  jitted = functools.cache(lambda: build(fun))

  def to_global(axis, value):
    mesh = _pmap_mesh(axis_name, devices)
    spec = jax.P() if axis is None else jax.P(*mesh.axis_names)
    # A traced value (the step called under jit or grad) is global already.
    return jax.tree.map(
        lambda x: multihost_utils.host_local_array_to_global_array(
            x, mesh, spec) if hasattr(x, "shape") and not isinstance(
                x, jax.core.Tracer) else x, value)

  def to_local(x):
    if not isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer) or (
        x.is_fully_addressable or x.is_fully_replicated):
      return x
    return multihost_utils.global_array_to_host_local_array(
        x, x.sharding.mesh, x.sharding.spec)

  def call(*args, **kwargs):
    if jax.process_count() > 1:
      dynamic = [i for i in range(len(args)) if i not in static_argnums]
      axes = (in_axes if isinstance(in_axes, (tuple, list))
              else [in_axes] * len(dynamic))
      args = list(args)
      for i, axis in zip(dynamic, axes):
        args[i] = jax.tree.map(to_global, axis, args[i],
                               is_leaf=lambda a: a is None)
      kwargs = to_global(0, kwargs)
    out = jitted()(*args, **kwargs)
    if jax.process_count() > 1:
      out = jax.tree.map(to_local, out)
    if jax.default_backend() == "cpu":
      jax.block_until_ready(out)
    return out

  call.jitted = jitted
  return call
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
