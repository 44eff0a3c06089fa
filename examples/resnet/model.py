"""A small ResNet-style CNN for 8x8x1 digit images, with synced BatchNorm."""

import functools

import flax.linen as nn
import jax.numpy as jnp


class ResidualBlock(nn.Module):
  """conv-BN-relu-conv-BN plus the input, then relu.

  Attributes:
    features: Channels of both convolutions (and of the input).
    axis_name: The mapped axis BatchNorm averages its statistics over, or
      None for per-device statistics (or a single device).
  """

  features: int
  axis_name: str | None = None

  @nn.compact
  def __call__(self, x, train: bool):
    norm = functools.partial(
        nn.BatchNorm, use_running_average=not train, momentum=0.9,
        epsilon=1e-5, axis_name=self.axis_name)
    y = nn.Conv(self.features, (3, 3), use_bias=False)(x)
    y = nn.relu(norm()(y))
    y = nn.Conv(self.features, (3, 3), use_bias=False)(y)
    return nn.relu(x + norm()(y))


class ResNet(nn.Module):
  """Stem, two residual blocks, global average pool, dropout, Dense(10).

  Attributes:
    axis_name: The mapped axis BatchNorm averages its batch statistics over:
      "batch" in the pmap program, "data" in the shard_map port, None on one
      device. Parameters and batch statistics do not depend on it.
    features: Channels of the stem and of the residual blocks.
    num_classes: Number of output logits.
  """

  axis_name: str | None = None
  features: int = 16
  num_classes: int = 10

  @nn.compact
  def __call__(self, images_BHWC, train: bool = False):
    # momentum 0.9 rather than flax's 0.99: a 30-step run must move the
    # running averages far enough from their init for evaluation to work.
    norm = functools.partial(
        nn.BatchNorm, use_running_average=not train, momentum=0.9,
        epsilon=1e-5, axis_name=self.axis_name)
    # The convolutions feed BatchNorm, whose bias makes theirs redundant.
    x = nn.Conv(self.features, (3, 3), use_bias=False)(images_BHWC)
    x = nn.relu(norm()(x))
    for _ in range(2):
      x = ResidualBlock(self.features, self.axis_name)(x, train)
    x = jnp.mean(x, axis=(1, 2))
    x = nn.Dropout(rate=0.1, deterministic=not train)(x)
    return nn.Dense(self.num_classes)(x)
