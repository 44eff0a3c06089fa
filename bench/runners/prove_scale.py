"""The prover at real sizes: peak memory, copies of the state and CPU time.

    python -m bench.runners.prove_scale [--sizes 0.5,2,4,8] [--transformer]
        [--steps 4] [--reference] [--census]

For each size (millions of parameters), a flax Linen MLP under AdamW,
written as a team writes it: a donating pmap step that pmeans its
gradients, its port `jit(shard_map)` (donating too), and a `compare.Port`
(optionally with a `reference_step`, pmap's step under `vmap`).
`--transformer` adds a Transformer encoder at flax nlp_seq's default size
(6 layers, width 512, MLP 2048, 8 heads: about 19M parameters). Each size
runs in fresh processes on 8 emulated CPU devices, under `/usr/bin/time
-v`: `compare.prove(port, windows=0)` (not timed, as a CI proof runs) for
`--steps` steps, and the two programs alone
(pmap's steps, then the port's, the same steps and batches). Prints, per
size: one copy of the state (parameters and AdamW's moments), the proof's
peak resident memory and what it is in sets of the 8 devices' state
(peak / (8 x one copy)), the programs' peak and what the proof adds over
it in sets, both CPU times and their ratio, and the verdict.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import re
import subprocess
import sys

import numpy as np

DEVICES = 8
GLOBAL_BATCH = 64
AXIS = "batch"


def _mlp(params_millions):
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  depth = 4
  width = int((params_millions * 1e6 / depth) ** 0.5)

  class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
      for _ in range(depth - 1):
        x = nn.relu(nn.Dense(width)(x))
      return nn.Dense(width)(x)

  return MLP(), (GLOBAL_BATCH, width), lambda out, y: ((out - y) ** 2).mean()


def _transformer():
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  layers, width, mlp, heads, vocab, length = 6, 512, 2048, 8, 1000, 32

  class Encoder(nn.Module):
    @nn.compact
    def __call__(self, tokens):
      x = nn.Embed(vocab, width)(tokens.astype(jnp.int32))
      for _ in range(layers):
        y = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=heads)(y, y)
        y = nn.LayerNorm()(x)
        x = x + nn.Dense(width)(nn.gelu(nn.Dense(mlp)(y)))
      return nn.Dense(vocab)(nn.LayerNorm()(x))

  def loss(out, y):
    import optax  # pylint: disable=g-import-not-at-top
    return optax.softmax_cross_entropy_with_integer_labels(
        out, y.astype(jnp.int32)).mean()

  return Encoder(), (GLOBAL_BATCH // 4, length), loss, vocab


def build_port(kind: str, size: float, steps: int, reference: bool):
  """The team program at `size` and its `compare.Port`."""
  import functools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from flax.training import train_state  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top

  import compare  # pylint: disable=g-import-not-at-top

  if kind == "transformer":
    model, shape, loss_of, vocab = _transformer()
  else:
    (model, shape, loss_of), vocab = _mlp(size), None

  def batch(i):
    rng = np.random.default_rng(i)
    if vocab:
      x = rng.integers(0, vocab, shape).astype(np.float32)
      return {"x": x, "y": np.roll(x, 1, axis=1)}
    x = rng.normal(size=shape).astype(np.float32)
    return {"x": x, "y": np.tanh(x)}

  def init():
    params = model.init(jax.random.key(0), batch(0)["x"][:1])["params"]
    return train_state.TrainState.create(
        apply_fn=model.apply, params=params,
        tx=optax.adamw(1e-3, weight_decay=1e-4))

  def step(state, batch):
    def loss(params):
      return loss_of(state.apply_fn({"params": params}, batch["x"]),
                     batch["y"])
    value, grads = jax.value_and_grad(loss)(state.params)
    grads = jax.lax.pmean(grads, AXIS)
    return state.apply_gradients(grads=grads), {
        "loss": jax.lax.pmean(value, AXIS)}

  mesh = jax.make_mesh((DEVICES,), (AXIS,),
                       axis_types=(jax.sharding.AxisType.Auto,))
  port_step = jax.jit(jax.shard_map(
      step, mesh=mesh, in_specs=(P(), P(AXIS)), out_specs=(P(), P()),
      check_vma=False),  # as pmap runs: the gradient trap otherwise
                      donate_argnums=0)
  pmap_step = jax.pmap(step, axis_name=AXIS, donate_argnums=0)
  reference_step = None
  if reference:
    per_device = jax.vmap(step, in_axes=(None, 0), axis_name=AXIS)
    reference_step = jax.jit(lambda s, b: jax.tree.map(
        lambda x: x[0], per_device(s, compare.split_batch(b, DEVICES))))
  del functools
  return compare.Port(
      name=f"{kind}-{size}M", init=init, pmap_step=pmap_step,
      port_step=port_step, mesh=mesh, batches=batch, steps=steps,
      reference_step=reference_step)


def _child(args) -> None:
  """One size in this process: the proof, or the two programs alone."""
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_num_cpu_devices", DEVICES)
  import compare  # pylint: disable=g-import-not-at-top

  kind, size = args.one.split(":")
  port = build_port(kind, float(size), args.steps, args.reference)
  # Shapes only: the proof calls `init` itself, the programs below once.
  shapes = jax.eval_shape(port.init)
  leaves = jax.tree.leaves((shapes.params, shapes.opt_state))
  record = {"params": sum(x.size for x in jax.tree.leaves(shapes.params)),
            "state_bytes": sum(x.size * x.dtype.itemsize for x in leaves)}
  if args.programs_only:
    state = port.init()
    stacked = compare.replicate(state, jax.local_devices())
    for i in range(args.steps):
      stacked, _ = port.pmap_step(stacked, compare.split_batch(
          port.batches(i), DEVICES))
    jax.block_until_ready(stacked)
    del stacked
    placed = compare.to_mesh(state, port.mesh)
    for i in range(args.steps):
      placed, _ = port.port_step(placed, compare.shard_batch(
          port.batches(i), port.mesh))
    jax.block_until_ready(placed)
  elif args.census:
    from bench.runners import prove_census  # pylint: disable=g-import-not-at-top
    with prove_census.counted(setattr, record["state_bytes"],
                              host=True) as seen:
      compare.prove(port, windows=0)
    record["device_sets"] = max(device for device, _ in seen)
    record["host_copies"] = max(host for _, host in seen)
  else:
    # No timing windows: the proof as a CI run takes it (timing is more
    # steps by design, not the proof's cost).
    proof = compare.prove(port, windows=0)
    record["verdict"] = proof.verdict
    record["first_failure"] = proof.first_failure
  print("RECORD " + json.dumps(record))


def _measure(argv) -> dict:
  done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m",
                         "bench.runners.prove_scale", *argv], text=True,
                        capture_output=True, check=False)
  rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
  user = re.search(r"User time \(seconds\): ([\d.]+)", done.stderr)
  system = re.search(r"System time \(seconds\): ([\d.]+)", done.stderr)
  record = next((json.loads(line[7:]) for line in done.stdout.splitlines()
                 if line.startswith("RECORD ")), None)
  if record is None:
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"failed": f"exit {done.returncode}: {tail[:120]}",
            "peak_mb": int(rss.group(1)) / 1e3 if rss else None}
  record["peak_mb"] = int(rss.group(1)) / 1e3
  record["cpu_s"] = float(user.group(1)) + float(system.group(1))
  return record


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default="0.5,2,4,8",
                      help="MLP sizes, millions of parameters")
  parser.add_argument("--transformer", action="store_true")
  parser.add_argument("--steps", type=int, default=4)
  parser.add_argument("--reference", action="store_true")
  parser.add_argument("--json", help="also write the rows here")
  parser.add_argument("--one", help=argparse.SUPPRESS)
  parser.add_argument("--programs-only", action="store_true",
                      help=argparse.SUPPRESS)
  parser.add_argument("--census", action="store_true",
                      help="also count device sets and host copies at each "
                      "lockstep boundary (one more proof per size)")
  args = parser.parse_args(argv)
  if args.one:
    _child(args)
    return 0
  runs = [f"mlp:{s}" for s in args.sizes.split(",") if s]
  runs += ["transformer:19"] if args.transformer else []
  common = ["--steps", str(args.steps)] + (
      ["--reference"] if args.reference else [])
  print(f"{'program':<16} {'params':>7} {'copy MiB':>9} {'proof MB':>9} "
        f"{'sets':>5} {'progs MB':>9} {'added':>6} {'proof s':>8} "
        f"{'progs s':>8} {'ratio':>6}  verdict")
  rows, worst = [], 0
  for run in runs:
    proof = _measure(["--one", run, *common])
    programs = _measure(["--one", run, "--programs-only", *common])
    row = {"run": run, "proof": proof, "programs": programs}
    if args.census and "failed" not in proof:
      row["census"] = _measure(["--one", run, "--census", *common])
      proof["census"] = (f"  census: {row['census']['device_sets']:.2f} "
                         f"device sets, {row['census']['host_copies']:.2f} "
                         "host copies") if "failed" not in row[
                             "census"] else "  census failed"
    rows.append(row)
    if "failed" in proof or "failed" in programs:
      print(f"{run:<16} failed: {proof.get('failed') or programs['failed']}"
            f" (peak {proof.get('peak_mb')} MB)")
      worst = 1
      continue
    copy = proof["state_bytes"] / 2**20
    sets = proof["peak_mb"] * 1e6 / (DEVICES * proof["state_bytes"])
    # What the proof holds over the larger program alone, in sets.
    added = ((proof["peak_mb"] - programs["peak_mb"]) * 1e6
             / (DEVICES * proof["state_bytes"]))
    ratio = proof["cpu_s"] / programs["cpu_s"]
    print(f"{run:<16} {proof['params'] / 1e6:>6.1f}M {copy:>9.1f} "
          f"{proof['peak_mb']:>9.0f} {sets:>5.1f} {programs['peak_mb']:>9.0f}"
          f" {added:>6.1f} {proof['cpu_s']:>8.1f} {programs['cpu_s']:>8.1f} {ratio:>6.2f}"
          f"  {proof['verdict']} {proof['first_failure'] or ''}"
          f"{proof.get('census', '')}")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as out:
      json.dump({"what": "bench.runners.prove_scale: the prover at real sizes "
                         "(issue 57)",
                 "command": " ".join(["python -m bench.runners.prove_scale",
                                      *(argv or sys.argv[1:])]),
                 "date": datetime.datetime.now(
                     datetime.timezone.utc).isoformat(timespec="seconds"),
                 "commit": subprocess.run(
                     ["git", "rev-parse", "--short", "HEAD"], text=True,
                     capture_output=True, check=False).stdout.strip(),
                 "jax_version": importlib.metadata.version("jax"),
                 "load_average_after": round(os.getloadavg()[0], 2),
                 "rows": rows}, out, indent=1)
  return worst


if __name__ == "__main__":
  sys.exit(main())
