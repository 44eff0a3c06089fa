"""jax's examples/datasets.py stand-in: `mnist()` in its format (flat
float32 images in [0, 1], one-hot float32 labels), synthetic, offline."""
import numpy as np


def mnist():
  rng = np.random.RandomState(0)
  def split(n):
    images = rng.rand(n, 784).astype(np.float32)
    return images, np.eye(10, dtype=np.float32)[rng.randint(0, 10, n)]
  return (*split(512), *split(256))
