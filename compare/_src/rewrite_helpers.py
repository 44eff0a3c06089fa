"""The code `python -m compare.rewrite` adds to a rewritten file, once.

`HELPERS` (always): `_pmap_mesh`, the devices pmap maps over as a 1-D mesh
built once per axis, and `_pmap_view`, a step as pmap ran it on one device.
`STATIC_HELPER` (where a pmap has `static_broadcasted_argnums`):
`_pmap_static`, the static arguments bound into the step.
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
  (an axis of None: broadcast, as pmap takes and returns it)."""

  def block(tree, axis, take):
    if axis is None:
      return tree
    return jax.tree.map(
        lambda x: x[0] if take else jax.numpy.expand_dims(x, 0), tree)

  def on_device(*args):
    axes = (in_axes if isinstance(in_axes, (tuple, list))
            else [in_axes] * len(args))
    out = fn(*[block(a, axis, True) for a, axis in zip(args, axes)])
    if not isinstance(out_axes, (tuple, list)):
      return block(out, out_axes, False)
    outs = [block(o, axis, False) for o, axis in zip(out, out_axes)]
    return type(out)(*outs) if hasattr(out, "_fields") else type(out)(outs)

  return on_device
'''

STATIC_HELPER = '''

def _pmap_static(shard_mapped, fn, static_argnums):
  """pmap's static_broadcasted_argnums: jit hands the static arguments over
  as Python values; they are bound into `fn` and the others mapped."""

  def call(*args):
    static = {i: args[i] for i in static_argnums}

    def bound(*mapped):
      rest = iter(mapped)
      return fn(*[static[i] if i in static else next(rest)
                  for i in range(len(args))])

    return shard_mapped(bound)(
        *[a for i, a in enumerate(args) if i not in static])

  return call
'''
