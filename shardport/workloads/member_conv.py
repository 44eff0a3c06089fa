"""A convolution that XLA splits over stacked ensemble members.

`jax.vmap` of `lax.conv_general_dilated` over members that each hold their
own kernel gives a grouped convolution (`feature_group_count` = members),
forward and backward, and XLA's SPMD partitioner gathers those whole onto
every device rather than split them over a member axis of the mesh
(docs/jax-facts.md). `conv` is the same convolution for one member, but
vmapped it takes the members' rows as a batch-grouped convolution
(`batch_group_count` = members, `jax.custom_batching.custom_vmap`) and its
gradients likewise (`jax.custom_vjp`): the partitioner splits those over the
members, each device convolving its own members' rows with their kernels,
with no collective. Each device's convolution is then the one member's
convolution: measured bitwise to the per-member program
(tests/test_jit_ports.py).

Use it as `flax.linen.Conv(..., conv_general_dilated=member_conv.conv)`
for a convolution whose inputs differ per member (a hidden layer); the first
layer's shared images need no help (vmapped over the kernel alone it is one
convolution with every member's features).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

_NHWC = ("NHWC", "HWIO", "NHWC")
# The kernel's gradient contracts the batch: the inputs' batch is read as
# the feature dimension and the gradient as the kernel (`lax`'s own rule).
_KERNEL_GRAD = ("CHWN", "IHWO", "NHWC")


def _pads(padding, kernel_hw):
  if isinstance(padding, str):
    # At stride 1 only the kernel's size sets the padding.
    return lax.padtype_to_pads((1, 1), kernel_hw, (1, 1), padding)
  return [tuple(p) for p in padding]


def _check(window_strides, lhs_dilation, rhs_dilation, feature_group_count,
           batch_group_count, dimension_numbers):
  plain = (tuple(window_strides) == (1, 1)
           and tuple(lhs_dilation or (1, 1)) == (1, 1)
           and tuple(rhs_dilation or (1, 1)) == (1, 1)
           and feature_group_count == 1 and batch_group_count == 1)
  if not plain:
    raise ValueError("member_conv.conv takes a stride-1, undilated, "
                     "ungrouped 2-D convolution")
  if dimension_numbers is not None and lax.conv_dimension_numbers(
      (1, 1, 1, 1), (1, 1, 1, 1), dimension_numbers) != \
      lax.conv_dimension_numbers((1, 1, 1, 1), (1, 1, 1, 1), _NHWC):
    raise ValueError("member_conv.conv takes NHWC inputs and HWIO kernels")


def _stacked(in_batched, args, size):
  return [a if batched else jnp.broadcast_to(a, (size, *a.shape))
          for batched, a in zip(in_batched, args)]


def _groups_last(x_MBHWC, batch_shards):
  """`[M, B, H, W, C]` -> `[B / S, H, W, M * S * C]`, S the batch's shares."""
  m, b, h, w, c = x_MBHWC.shape
  x = x_MBHWC.reshape(m, batch_shards, b // batch_shards, h, w, c)
  return jnp.transpose(x, (2, 3, 4, 0, 1, 5)).reshape(
      b // batch_shards, h, w, m * batch_shards * c)


def _groups_first(x_bHWGC, members, batch_shards):
  """`_groups_last`'s inverse: `[B / S, H, W, M * S * C]` -> `[M, B, ...]`."""
  b, h, w, gc = x_bHWGC.shape
  x = x_bHWGC.reshape(b, h, w, members, batch_shards,
                      gc // (members * batch_shards))
  return jnp.transpose(x, (3, 4, 0, 1, 2, 5)).reshape(
      members, batch_shards * b, h, w, -1)


def _forward(pads, batch_shards):
  """One member's `lhs * rhs`; vmapped, the members' batch-grouped one."""

  @jax.custom_batching.custom_vmap
  def forward(lhs_BHWC, rhs_HWIO):
    return lax.conv_general_dilated(lhs_BHWC, rhs_HWIO, (1, 1), pads,
                                    dimension_numbers=_NHWC)

  @forward.def_vmap
  def _(size, in_batched, lhs_MBHWC, rhs_MHWIO):
    lhs_MBHWC, rhs_MHWIO = _stacked(in_batched, (lhs_MBHWC, rhs_MHWIO), size)
    groups = size * batch_shards
    m, b, h, w, c = lhs_MBHWC.shape
    kh, kw, i, o = rhs_MHWIO.shape[1:]
    # Each group (a member's share of the batch) with its member's kernel.
    rhs = jnp.broadcast_to(rhs_MHWIO[:, None],
                           (m, batch_shards, kh, kw, i, o))
    rhs = jnp.transpose(rhs, (2, 3, 4, 0, 1, 5)).reshape(kh, kw, i, groups * o)
    out = lax.conv_general_dilated(
        lhs_MBHWC.reshape(m * b, h, w, c), rhs, (1, 1), pads,
        dimension_numbers=_NHWC, batch_group_count=groups)
    return _groups_first(out, m, batch_shards), True

  return forward


def _kernel_grad(pads, batch_shards):
  """One member's kernel gradient; vmapped, the members' batch-grouped one,
  each member's shares of the batch summed."""

  @jax.custom_batching.custom_vmap
  def kernel_grad(lhs_BHWC, grad_BHWO):
    out_CHWO = lax.conv_general_dilated(lhs_BHWC, grad_BHWO, (1, 1), pads,
                                        dimension_numbers=_KERNEL_GRAD)
    return jnp.transpose(out_CHWO, (1, 2, 0, 3))

  @kernel_grad.def_vmap
  def _(size, in_batched, lhs_MBHWC, grad_MBHWO):
    lhs_MBHWC, grad_MBHWO = _stacked(in_batched, (lhs_MBHWC, grad_MBHWO),
                                     size)
    out = lax.conv_general_dilated(
        _groups_last(lhs_MBHWC, batch_shards),
        _groups_last(grad_MBHWO, batch_shards), (1, 1), pads,
        dimension_numbers=_KERNEL_GRAD,
        batch_group_count=size * batch_shards)
    c, kh, kw, _ = out.shape
    out = out.reshape(c, kh, kw, size, batch_shards, -1).sum(4)
    return jnp.transpose(out, (3, 1, 2, 0, 4)), True

  return kernel_grad


@functools.cache
def _conv(pads, kernel_hw, batch_shards):
  """The differentiable convolution for one padding, kernel size and
  split of the batch."""
  forward = _forward(pads, batch_shards)
  kernel_grad = _kernel_grad(pads, batch_shards)
  # The inputs' gradient is the output's gradient convolved with the kernel
  # turned half round, its in and out features swapped, padded so that the
  # result has the inputs' size.
  input_grad = _forward([(k - 1 - lo, k - 1 - hi)
                         for k, (lo, hi) in zip(kernel_hw, pads)],
                        batch_shards)

  @jax.custom_vjp
  def conv(lhs, rhs):
    return forward(lhs, rhs)

  def conv_fwd(lhs, rhs):
    return forward(lhs, rhs), (lhs, rhs)

  def conv_bwd(residuals, grad):
    lhs, rhs = residuals
    return (input_grad(grad, jnp.swapaxes(rhs[::-1, ::-1], 2, 3)),
            kernel_grad(lhs, grad))

  conv.defvjp(conv_fwd, conv_bwd)
  return conv


def conv(lhs, rhs, window_strides, padding, lhs_dilation=None,
         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
         batch_group_count=1, precision=None, preferred_element_type=None,
         batch_shards=1):
  """`lax.conv_general_dilated` for one member, split over members vmapped.

  Takes `lax.conv_general_dilated`'s arguments, as `flax.linen.Conv` passes
  them, for a stride-1, undilated, ungrouped NHWC x HWIO convolution.

  Args:
    lhs: `[N, H, W, C]` inputs.
    rhs: `[kh, kw, C, F]` kernel.
    window_strides: (1, 1).
    padding: 'SAME', 'VALID' or `((lo, hi), (lo, hi))`.
    lhs_dilation: None or (1, 1).
    rhs_dilation: None or (1, 1).
    dimension_numbers: None or NHWC, HWIO, NHWC.
    feature_group_count: 1.
    batch_group_count: 1.
    precision: None, the default.
    preferred_element_type: None, the inputs'.
    batch_shards: the shares of each member's batch that the mesh splits
      over devices (its data axis); each share is a group of its own, so
      the partitioner splits the batch too. Not an argument of `lax`'s.

  Returns:
    `[N, H', W', F]`, as `lax.conv_general_dilated` returns.

  Raises:
    ValueError: any other convolution.
  """
  _check(window_strides, lhs_dilation, rhs_dilation, feature_group_count,
         batch_group_count, dimension_numbers)
  if precision is not None or preferred_element_type is not None:
    raise ValueError("member_conv.conv takes the default precision and "
                     "element type")
  kernel_hw = tuple(rhs.shape[:2])
  return _conv(tuple(_pads(padding, kernel_hw)), kernel_hw,
               batch_shards)(lhs, rhs)
