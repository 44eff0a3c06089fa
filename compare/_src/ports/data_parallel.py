"""data_parallel as a `compare.Port`, from its twin modules.

pmap's step is `legacy_pmap.data_parallel`'s, its two ports (shard_map,
and jit under the name `jit`) are `sharded.data_parallel`'s, the reference
is the strategy's one-device `Reference`; each side evaluates its own
state on the test set split over its devices.
"""

import jax

import compare
from legacy_pmap import data_parallel as pmap_program
from sharded import data_parallel as mesh_program
from shardport.strategies.data_parallel import Reference
from shardport.workloads import batches as batch_order
from shardport.workloads import registry

PORT_NAME, EXTRA = "shard_map", "jit"
PAIRS = (("pmap", PORT_NAME), ("pmap", "reference"),
         (PORT_NAME, "reference"), (EXTRA, "reference"))


def train_batches(config, data):
  """Step -> the global host batch of `data` at that step, in the seed's
  order (every strategy's batches)."""
  order = batch_order.batch_order(config.seed, len(data.train_inputs),
                                  config.global_batch, config.steps)

  def batch(i):
    # Past the last step (the timing windows' batches) the seed's order
    # goes on: its first steps are the same for any length.
    rows = order[i] if i < len(order) else batch_order.batch_order(
        config.seed, len(data.train_inputs), config.global_batch, i + 1)[i]
    return {"inputs": data.train_inputs[rows],
            "targets": data.train_targets[rows]}

  return batch


def port(strategy, config, data, n_devices: int, control=None):
  """The strategy's `compare.Port` with `config` and `data` on `n_devices`
  devices per process; with `control`'s mistake planted in the port's
  twin module (as `--negative-control` plants it)."""
  mesh = mesh_program.make_placement(n_devices)
  devices = pmap_program.make_placement(n_devices)
  one = Reference.make_placement(n_devices)
  ports = {name: mesh_program if control is None else
           control.plant(mesh_program, name) for name in (PORT_NAME, EXTRA)}
  # The port's own initial state only where a control changes how the
  # port builds it (its learning rate): the unplanted Port shares `init`.
  port_init = None if control is None else jax.device_get(
      ports[PORT_NAME].create_state(config.seed, config, mesh))
  return compare.Port(
      name=strategy.name,
      init=registry.init_state(config.seed, config),
      port_init=port_init,
      pmap_step=pmap_program.make_train_step(config, devices),
      port_step=ports[PORT_NAME].make_train_step(config, mesh, PORT_NAME),
      extra_ports={EXTRA: ports[EXTRA].make_train_step(config, mesh, EXTRA)},
      reference_step=Reference.make_train_step(config, one),
      mesh=mesh, steps=config.steps,
      batches=train_batches(config, data),
      port_name=PORT_NAME, pairs=PAIRS, calibration="row_order",
      device_evaluation=device_evaluation(
          strategy, config, data, (pmap_program, devices),
          (ports[PORT_NAME], mesh), one))


def device_evaluation(strategy, config, data, pmap_side, port_side, one):
  """The strategy's test evaluation on each side's devices
  (`compare.DeviceEvaluation`): `pmap_side` and `port_side` are each
  `(twin module, its placement)`, `one` the reference's device; the
  reference is data_parallel's one-device program."""
  (pmap_module, devices), (port_module, mesh) = pmap_side, port_side
  return compare.DeviceEvaluation(
      batch=batch_order.test_batch(data, mesh.size),
      pmap_step=pmap_module.make_evaluate(config, devices),
      port_step=port_module.make_evaluate(config, mesh),
      reference_step=Reference.make_evaluate(config, one),
      summarize=lambda sums: strategy.summarize(sums, config),
      metrics=tuple(strategy.judged_metrics))
