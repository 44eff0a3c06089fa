"""Small drivers shared by the strategy tests (not a test module)."""

import jax

from workloads import batches


def train(module, variant, config, data, n_devices, steps=None):
  """Runs `steps` steps of one backend; returns the host state."""
  placement = module.make_placement(n_devices)
  state = module.create_state(config.seed, config, placement)
  step = module.make_train_step(config, placement, variant)
  for host_batch in batches.train_batches(data, config.seed,
                                          config.global_batch,
                                          steps or config.steps):
    state, _ = step(state, module.put_batch(host_batch, placement))
    # Queued collective steps can deadlock XLA:CPU's emulated devices
    # (compare.timing.max_in_flight): wait for each step.
    jax.block_until_ready(state)
  return module.to_host(state)
