"""What a compiled step holds: collective counts and memory."""

import re

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter",
               "collective-permute", "all-to-all")
# An HLO instruction reads `%name = type op(operands)`: the op follows a space
# (names start with %), and async collectives appear as `op-start`.
_OP = re.compile(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")


def count_collectives(hlo_text: str) -> dict[str, int]:
  """How many of each collective the optimised HLO holds."""
  counts = dict.fromkeys(COLLECTIVES, 0)
  for match in _OP.finditer(hlo_text):
    counts[match.group(1)] += 1
  return counts


def memory(compiled) -> dict[str, int]:
  """Temp, argument, output and aliased bytes of a compiled executable.

  On XLA:CPU `peak_memory_in_bytes` excludes temp buffers (JAX-FACTS), so the
  four parts are reported rather than a peak.
  """
  stats = compiled.memory_analysis()
  return {
      "temp_bytes": int(stats.temp_size_in_bytes),
      "argument_bytes": int(stats.argument_size_in_bytes),
      "output_bytes": int(stats.output_size_in_bytes),
      "alias_bytes": int(stats.alias_size_in_bytes),
  }


def describe(compiled) -> dict:
  """Collectives and memory of one compiled step."""
  return {"collectives": count_collectives(compiled.as_text()),
          "memory": memory(compiled)}
