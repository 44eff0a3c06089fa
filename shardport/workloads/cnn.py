"""The CNN of the classic pmap programs and its summed cross-entropy loss."""

import flax.linen as nn
import jax.numpy as jnp
import optax


class CNN(nn.Module):
  """Conv32-relu-avgpool-Conv64-relu-avgpool-Dense256-relu-Dense10.

  Accepts images of any height and width (at least 4x4) with one channel.
  """

  num_classes: int = 10

  @nn.compact
  def __call__(self, images_BHWC):
    x = nn.Conv(features=32, kernel_size=(3, 3))(images_BHWC)
    x = nn.avg_pool(nn.relu(x), window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(features=64, kernel_size=(3, 3))(x)
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
