"""The ensemble step's costs: barrier, stacking, one program vs two.

  python -m bench.probes.perf.ensemble_variants [--members 8] [--devices 8]
      [--variants before,port,two_jits+update_vmap] [--windows 10]
      [--repeats 3] [--steps 5]

Builds the classic pmap step (legacy_pmap/ensemble.py), the shard_map port
(sharded/ensemble.py) and variants of the port, and prints for each:
bitwise equality with pmap after `--steps` steps (params and optimiser
state, every member), ops in the optimised HLO (copies, opt-barriers,
fusions), temp bytes, the speed relative to pmap timed interleaved window
by window (`bench/probes/perf/paired.py`: wall clock and process CPU time), and
the process's context switches per step.

Variants: `port` (sharded.ensemble.make_train_step as it is now: its
update vmapped since issue 13), `before` (the port before issue 13: each
member sliced, passed through an optimisation barrier and stacked on both
sides), `port_again` and `pmap_again` (second instances: A/A controls of
the timing), or the
port of before issue 13 rebuilt here with flags joined by `+`:
  no_barrier           no `lax.optimization_barrier` on a member's inputs.
  apply_barrier_only   the barrier in the gradient program only.
  update_barrier_only  the barrier in the update program only.
  squeeze              one member per device: `x[0]` in, `x[None]` out, no
                       `jnp.stack` (with the barrier unless no_barrier).
  one_body             gradients and update in one shard_map body per member.
  two_jits             the two shard_maps as two executables called one
                       after the other from Python, as pmap's program does.
  no_donate            one executable, the state not donated.
  state_barrier        one executable, a barrier on (state, gradients)
                       between the two shard_maps.
  update_vmap          the update vmapped over this device's members (it is
                       elementwise: batching cannot change its rounding).
  apply_vmap           the gradients vmapped over this device's members
                       (`--member-loop vmap`: ~1 ulp per step off).
"""

import argparse
import os
import statistics

from bench.probes.perf import probe_env


def _parse():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--devices", type=int, default=8)
  p.add_argument("--members", type=int, default=8)
  p.add_argument("--batch", type=int, default=128)
  p.add_argument("--variants", default="before,port,"
                 "two_jits+update_vmap")
  p.add_argument("--windows", type=int, default=10)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--steps", type=int, default=5)
  p.add_argument("--baseline", default="",
                 help="the run the others are timed against (default: the "
                 "first, pmap where it runs)")
  p.add_argument("--dump", default="")
  return p.parse_args()


ARGS = _parse()
probe_env.emulate(ARGS.devices)

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import numpy as np

from bench.probes.perf import paired
from legacy_pmap import ensemble as legacy
from sharded import devices
from sharded import ensemble as port
from shardport.workloads import batches, configs, datasets, ensemble

MEMBERS, REPLICATED = P(devices.ENSEMBLE_AXIS), P()


def each_member(fn, members, *shared, barrier=True, squeeze=False):
  """`port._each_member`, sequential, with the barrier or the loop optional."""
  count = jax.tree.leaves(members)[0].shape[0]
  if squeeze and count == 1:
    out = fn(*jax.tree.map(lambda x: x[0], members), *shared)
    return jax.tree.map(lambda x: x[None], out)
  outs = []
  for i in range(count):
    args = (*jax.tree.map(lambda x, i=i: x[i], members), *shared)
    if barrier:
      args = lax.optimization_barrier(args)
    outs.append(fn(*args))
  return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def build(variant, config, placement):
  """The step for `variant`: `port`, or flags joined by `+` (see the doc)."""
  if variant in ("port", "port_again"):  # port_again: an A/A control
    return port.make_train_step(config, placement)
  if variant == "pmap_again":
    return legacy.make_train_step(config, placement)
  # `before`: the port before issue 13 (barrier and stack on both sides).
  flags = set() if variant == "before" else set(variant.split("+"))
  unknown = flags - {"no_barrier", "squeeze", "one_body", "two_jits",
                     "update_barrier_only", "apply_barrier_only",
                     "no_donate", "state_barrier", "update_vmap",
                     "apply_vmap"}
  assert not unknown, unknown
  apply_opts = dict(barrier="no_barrier" not in flags
                    and "update_barrier_only" not in flags,
                    squeeze="squeeze" in flags)
  update_opts = dict(barrier="no_barrier" not in flags
                     and "apply_barrier_only" not in flags,
                     squeeze="squeeze" in flags)
  grad_fn = jax.value_and_grad(ensemble.loss_fn, has_aux=True)

  def apply_model(state, batch):
    if "apply_vmap" in flags:  # port.MEMBER_LOOPS' "vmap": not bitwise
      (loss, logits), grads = jax.vmap(grad_fn, in_axes=(0, None))(
          state.params, batch)
    else:
      (loss, logits), grads = each_member(grad_fn, (state.params,), batch,
                                          **apply_opts)
    probs = lax.pmean(jax.nn.softmax(logits).mean(0),
                      axis_name=devices.ENSEMBLE_AXIS)
    return grads, {"member_loss": loss,
                   "accuracy": ensemble.accuracy(probs, batch["targets"])}

  def update_model(state, grads):
    if "update_vmap" in flags:
      return jax.vmap(lambda m, g: m.apply_gradients(grads=g))(state, grads)
    return each_member(lambda m, g: m.apply_gradients(grads=g),
                       (state, grads), **update_opts)

  metric_specs = {"member_loss": MEMBERS, "accuracy": REPLICATED}
  if "one_body" in flags:
    def body(state, batch):
      def member(m, batch):
        (loss, logits), grads = grad_fn(m.params, batch)
        return m.apply_gradients(grads=grads), loss, logits
      new, loss, logits = each_member(member, (state,), batch, **apply_opts)
      probs = lax.pmean(jax.nn.softmax(logits).mean(0),
                        axis_name=devices.ENSEMBLE_AXIS)
      return new, {"member_loss": loss,
                   "accuracy": ensemble.accuracy(probs, batch["targets"])}
    return jax.jit(jax.shard_map(body, mesh=placement,
                                 in_specs=(MEMBERS, REPLICATED),
                                 out_specs=(MEMBERS, metric_specs)),
                   donate_argnums=0)
  apply_model = jax.shard_map(apply_model, mesh=placement,
                              in_specs=(MEMBERS, REPLICATED),
                              out_specs=(MEMBERS, metric_specs))
  update_model = jax.shard_map(update_model, mesh=placement,
                               in_specs=(MEMBERS, MEMBERS),
                               out_specs=MEMBERS)
  if "two_jits" in flags:
    apply_jit = jax.jit(apply_model)
    update_jit = jax.jit(update_model, donate_argnums=0)

    def step(state, batch):
      grads, metrics = apply_jit(state, batch)
      return update_jit(state, grads), metrics
    step.lower_each = lambda s, b: [
        apply_jit.lower(s, b),
        update_jit.lower(s, jax.eval_shape(apply_model, s, b)[0])]
    return step

  def train_step(state, batch):
    grads, metrics = apply_model(state, batch)
    if "state_barrier" in flags:
      state, grads = lax.optimization_barrier((state, grads))
    return update_model(state, grads), metrics

  return jax.jit(train_step,
                 donate_argnums=() if "no_donate" in flags else 0)


def _texts(step, state, batch):
  """Optimised HLO texts and temp bytes of the executables one step runs."""
  lowered = (step.lower_each(state, batch) if hasattr(step, "lower_each")
             else [step.lower(state, batch)])
  compiled = [l.compile() for l in lowered]
  return ([c.as_text() for c in compiled],
          sum(c.memory_analysis().temp_size_in_bytes for c in compiled))


def main():
  data = datasets.load("digits")
  config = configs.EnsembleConfig(members=ARGS.members, global_batch=ARGS.batch,
                                  input_shape=data.train_inputs.shape[1:])
  host_batches = list(batches.train_batches(data, config.seed, ARGS.batch,
                                            max(ARGS.steps, 1)))
  names = (["pmap"] if ARGS.members == ARGS.devices else []) + \
      ARGS.variants.split(",")
  modules = {name: legacy if name.startswith("pmap") else port
             for name in names}
  steps, finals = {}, {}
  print(f"jax {jax.__version__}, {ARGS.devices} devices, {ARGS.members} "
        f"members, batch {ARGS.batch}")
  for name in names:
    module = modules[name]
    placement = module.make_placement(ARGS.devices)
    step = (legacy.make_train_step(config, placement) if name == "pmap"
            else build(name, config, placement))
    state = module.create_state(config.seed, config, placement)
    batch = module.put_batch(host_batches[0], placement)
    texts, temp = _texts(step, state, batch)
    if ARGS.dump:
      os.makedirs(ARGS.dump, exist_ok=True)
      for i, text in enumerate(texts):
        with open(os.path.join(ARGS.dump, f"{name}.{i}.hlo"), "w") as f:
          f.write(text)
    ops = {op: sum(t.count(f" {op}(") for t in texts)
           for op in ("copy", "opt-barrier", "fusion", "convolution")}
    for b in host_batches[:ARGS.steps]:
      state, _ = step(state, module.put_batch(b, placement))
      jax.block_until_ready(state)
    finals[name] = module.to_host(state)
    steps[name] = (step, module, placement)
    base = finals[names[0]]
    same = all(np.array_equal(a, b) for a, b in
               zip(jax.tree.leaves(finals[name]), jax.tree.leaves(base)))
    worst = max(float(np.max(np.abs(a - b))) for a, b in
                zip(jax.tree.leaves(finals[name]), jax.tree.leaves(base)))
    print(f"{name:10s} executables {len(texts)}  ops {ops}  temp "
          f"{temp / 1024:.0f} KiB  after {ARGS.steps} steps vs {names[0]}: "
          f"{'bitwise' if same else f'max abs {worst:.2e}'}", flush=True)
  for repeat in range(ARGS.repeats):
    runs = {}
    for name, (step, module, placement) in steps.items():
      runs[name] = (step, module.create_state(config.seed, config, placement),
                    module.put_batch(host_batches[0], placement))
    result = paired.measure(runs, windows=ARGS.windows)
    load = os.getloadavg()[0]
    base_name = ARGS.baseline or names[0]
    for name in names:
      print(f"repeat {repeat + 1}: {name} context switches per step, median: "
            f"{statistics.median(result[name]['voluntary']):.0f} voluntary, "
            f"{statistics.median(result[name]['involuntary']):.0f} "
            "involuntary", flush=True)
    for name in [n for n in names if n != base_name]:
      print(f"repeat {repeat + 1}: {name} speed / {base_name}'s, window-paired "
            f"median (quartiles): wall "
            f"{paired.summary(paired.ratios(result, name, base_name, 'wall_ms'))}"
            f", CPU {paired.summary(paired.ratios(result, name, base_name, 'cpu_ms'))}"
            f"; ms/step wall {statistics.median(result[name]['wall_ms']):.1f} "
            f"vs {statistics.median(result[base_name]['wall_ms']):.1f}, CPU "
            f"{statistics.median(result[name]['cpu_ms']):.1f} vs "
            f"{statistics.median(result[base_name]['cpu_ms']):.1f}; load "
            f"{load:.1f}", flush=True)


if __name__ == "__main__":
  main()
