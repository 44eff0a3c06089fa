"""accumulation: pmap, shard_map and jit with K microbatches per step.

Beside the reference (one device, the global batch, no accumulation) the
plain data-parallel steps run on the same devices: with `--accum-steps 1`
each accumulation port must equal its data-parallel twin bitwise, and with
K > 1 their memory is the full-batch baseline on the same devices.
"""

from compare._src.reference import accumulation as reference
from compare._src.strategies.base import RunSpec
from compare._src.strategies.base import Strategy
from compare._src.strategies.data_parallel import COMMON_CONTROLS
from compare._src.strategies.data_parallel import FINAL
from compare._src.tolerances import Tolerance
from legacy_pmap import accumulation as legacy
from legacy_pmap import data_parallel as legacy_dp
from sharded import accumulation as port
from sharded import data_parallel as port_dp
from shardport.training.programs import AccumulationProgram
from shardport.training.programs.accumulation import ACCUMULATING_RUNS


class Accumulation(AccumulationProgram, Strategy):
  """Data-parallel training with K microbatches accumulated per step."""

  runs = (RunSpec("pmap", legacy, "pmap"),
          RunSpec("shard_map", port, "shard_map"),
          RunSpec("jit", port, "jit"),
          RunSpec("dp_pmap", legacy_dp, "pmap"),
          RunSpec("dp_shard_map", port_dp, "shard_map"),
          RunSpec("reference", reference, "reference"))
  pairs = (("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference"), ("jit", "reference"),
           ("pmap", "dp_pmap"), ("shard_map", "dp_shard_map"))
  tolerances = {
      "first_step": Tolerance(rtol=1e-5, atol=1e-5, reason=(
          "K microbatch gradients averaged against one full-batch gradient: "
          "only the summation order differs (no method is bit-exact). "
          "Measured at most 7.7e-7 of max|leaf| after one step (K in 1, 2, "
          "4; 1, 2, 8 devices), so 1e-5 as for data_parallel. K=1 against "
          "the plain data-parallel step is bitwise by construction (the "
          "first microbatch starts the running sum).")),
      "final": FINAL,
  }
  negative_controls = COMMON_CONTROLS

  def report_fields(self, config):
    """K, the loop, and the calls that make one optimiser step."""
    return {"accum_steps": config.accum_steps,
            "accum_loop": config.accum_loop,
            "calls_per_step": self.calls_per_step(config)}

  def run_fields(self, config, name, state):
    """Each run's microbatch loop; None for the runs that do not accumulate."""
    del state
    accumulates = name in ACCUMULATING_RUNS
    return {"accum_loop": config.accum_loop if accumulates else None}

  def report_lines(self, report):
    """Accumulation's point: its temp memory against the full-batch steps."""
    runs = report["runs"]
    temp = lambda name: runs[name].get("memory", {}).get("temp_bytes")
    lines = []
    for name in ("pmap", "shard_map", "jit"):
      if name not in runs or "reference" not in runs or not temp(name):
        continue
      same = f"dp_{name}" if f"dp_{name}" in runs else None
      lines.append(
          f"temp memory {name} (K={report['accum_steps']}, "
          f"{runs[name]['accum_loop']}): "
          f"{temp(name) / temp('reference'):.2f}x the one-device full batch"
          + (f", {temp(name) / temp(same):.2f}x the data-parallel step on "
             "the same devices" if same else ""))
    return lines
