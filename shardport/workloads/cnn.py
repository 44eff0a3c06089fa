"""The CNN of the classic pmap programs and its summed cross-entropy loss."""

from collections.abc import Callable

import flax.linen as nn
import jax.numpy as jnp
import optax


class CNN(nn.Module):
  """Conv32-relu-avgpool-Conv64-relu-avgpool-Dense256-relu-Dense10.

  Accepts images of any height and width (at least 4x4) with one channel.

  Attributes:
    num_classes: the logits per example.
    hidden_conv: the convolution the second `nn.Conv` calls on the first's
      activations (its `conv_general_dilated`); None for
      `lax.conv_general_dilated`. The params are the same either way. The
      first always convolves the images with `lax`: vmapped over members
      that share the images it is one convolution of every member's
      features, which XLA splits over a member axis of the mesh.
  """

  num_classes: int = 10
  hidden_conv: Callable | None = None

  @nn.compact
  def __call__(self, images_BHWC):
    x = nn.Conv(features=32, kernel_size=(3, 3))(images_BHWC)
    x = nn.avg_pool(nn.relu(x), window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3),
                conv_general_dilated=self.hidden_conv)(x)
    x = nn.avg_pool(nn.relu(x), window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(features=256)(x))
    return nn.Dense(features=self.num_classes)(x)


def cross_entropy_sum(logits_BK, labels_B):
  """Softmax cross entropy summed (not averaged) over the batch."""
  return optax.softmax_cross_entropy_with_integer_labels(
      logits_BK, labels_B).sum()


def cross_entropy_mean(logits_BK, labels_B):
  """Softmax cross entropy averaged over the batch."""
  return optax.softmax_cross_entropy_with_integer_labels(
      logits_BK, labels_B).mean()


def correct_count(logits_BK, labels_B):
  """How many argmax predictions equal the labels."""
  return jnp.sum(jnp.argmax(logits_BK, -1) == labels_B)


def shifted_window_conv(lhs, rhs, window_strides, padding, **unused):
  """A stride-1 NHWC x HWIO convolution as one einsum over shifted windows.

  `nn.Conv`'s call, for `CNN(hidden_conv=...)`. Under `vmap` over stacked members
  this is a batched matmul, which XLA's partitioner splits over a member
  axis of the mesh with no collective; `lax.conv_general_dilated` vmapped
  over a kernel becomes a grouped convolution, which it gathers across the
  mesh instead (docs/jax-facts.md). The float32 sums run in another
  order than the convolution's: the two differ by rounding.

  Args:
    lhs: `[N, H, W, C]` inputs.
    rhs: `[kh, kw, C, F]` kernel.
    window_strides: all 1.
    padding: 'SAME', 'VALID' or `((lo, hi), (lo, hi))`, as `nn.Conv` gives.
    **unused: `nn.Conv`'s dilations, dimension numbers, feature groups and
      precision, at their defaults for this CNN.

  Returns:
    `[N, H', W', F]`.
  """
  del unused
  if tuple(window_strides) != (1, 1):
    raise ValueError(f"shifted_window_conv takes stride 1, got "
                     f"{window_strides}")
  kh, kw, channels, features = rhs.shape
  if padding == "SAME":
    padding = [((k - 1) // 2, k - 1 - (k - 1) // 2) for k in (kh, kw)]
  elif padding == "VALID":
    padding = [(0, 0), (0, 0)]
  padded = jnp.pad(lhs, ((0, 0), *padding, (0, 0)))
  height = padded.shape[1] - kh + 1
  width = padded.shape[2] - kw + 1
  windows = jnp.stack([padded[:, i:i + height, j:j + width, :]
                       for i in range(kh) for j in range(kw)], axis=3)
  return jnp.einsum("nhwpc,pcf->nhwf", windows,
                    rhs.reshape(kh * kw, channels, features))
