"""brax's PPO, as its own `train_test.py` runs it: every number it returns.

    python bench/real_programs/brax_ppo.py BRAX_PARENT
    python bench/real_programs/brax_ppo.py /tmp/brax_port   # a rewrite

`BRAX_PARENT` is a folder holding a `brax` package (a copy of the installed
one, or that copy with `brax/training` rewritten); it is imported first.
Runs `brax.training.agents.ppo.train.train` on the `fast` environment with
`PPOTest.testTrain`'s settings (ndarray observations; 2**14 steps, half the
test's, 3 evaluations) on 8 emulated CPU devices, and prints each
evaluation's metrics as `progress_fn` receives them, the final metrics, and
a digest of every leaf of the returned parameters. Run it with a Python that
has `brax` beside jax 0.10.2 (`pip install brax`; CI does not: it brings
mujoco).
"""

import hashlib
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
# Metrics of wall time, which differ run to run.
WALL = ("sps", "_time", "walltime")


def main(parent: str) -> None:
  sys.path.insert(0, os.path.abspath(parent))
  # pylint: disable=g-import-not-at-top
  import brax
  from brax import envs
  from brax.training.agents.ppo import train as ppo
  import jax
  import numpy as np
  # pylint: enable=g-import-not-at-top
  assert brax.__file__.startswith(os.path.abspath(parent)), brax.__file__
  print("brax", brax.__version__, "jax", jax.__version__,
        "devices", jax.local_device_count(), "from", ppo.__file__,
        file=sys.stderr)

  def progress(step, metrics):
    for name in sorted(metrics):
      if not name.endswith(WALL):
        print("progress", step, name, float(np.asarray(metrics[name])))

  fast = envs.get_environment("fast", obs_mode="ndarray")
  _, params, metrics = ppo.train(
      fast, num_timesteps=2**14, episode_length=128, num_envs=64,
      learning_rate=3e-4, entropy_cost=1e-2, discounting=0.95,
      unroll_length=5, batch_size=64, num_minibatches=8,
      num_updates_per_batch=4, normalize_observations=True, seed=2,
      num_evals=3, reward_scaling=10, normalize_advantage=False,
      progress_fn=progress)
  for name in sorted(metrics):
    if not name.endswith(WALL):
      print("final", name, float(np.asarray(metrics[name])))
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    leaf = np.asarray(leaf)
    print("param", jax.tree_util.keystr(path), leaf.shape,
          hashlib.sha256(leaf.tobytes()).hexdigest()[:16])


if __name__ == "__main__":
  main(sys.argv[1])
