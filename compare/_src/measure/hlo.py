"""What a compiled step holds: collectives (written and executed) and memory.

Two counts of collectives, because they differ for rolled loops:

- `count_collectives` counts the collective instructions written in the
  optimised HLO text (static). A collective inside a `while` body is written
  once however many times the loop runs.
- `collectives_executed` counts what one call of the program executes: each
  computation's collectives times the number of times it runs, following the
  call graph from the entry computation; a `while` body runs
  `known_trip_count` times (XLA writes it into the while's `backend_config`
  in optimised HLO). Where the count cannot be known statically (a while
  without a known trip count, a conditional's branches) it says so in
  `Executed.unknown`: the count given there is the static one (one trip of
  the loop, the largest branch), a lower bound.

Measured with jax 0.10.2 on XLA:CPU: under plain `jit`, a microbatch loop
rolled as `lax.scan` holds 2 all-reduces in its text (the peeled first
microbatch and the loop body) and executes K per step.
"""

import dataclasses
import re

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter",
               "collective-permute", "all-to-all")
# An HLO instruction reads `%name = type op(operands)`: the op follows a space
# (names start with %), and async collectives appear as `op-start`.
_OP = re.compile(r"\s(" + "|".join(COLLECTIVES) + r")(?:-start)?\(")
# `%name = shape op(`: the shape may be a tuple `(f32[3]{0}, f32[])`.
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s"
                          r"([a-z][\w\-]*)\(")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_CALLEE = re.compile(r"\b(calls|to_apply|body|condition|true_computation|"
                     r"false_computation)=%?([\w.\-]+)")
_CALLEE_LIST = re.compile(r"\b(branch_computations|called_computations)="
                          r"\{([^}]*)\}")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_ARRAY = re.compile(r"\b([a-z]+\d*(?:e\d+m\d+\w*)?)\[([\d,]*)\]")
# `replica_groups={{0,1,2,3},{4,5,6,7}}` or the iota form `[2,4]<=[8]`.
_GROUPS = re.compile(r"replica_groups=(?:\{\{([\d,]*)\}|\[\d+,(\d+)\])")
_BITS = {"pred": 8, "s4": 4, "u4": 4, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
         "f16": 16, "bf16": 16, "s32": 32, "u32": 32, "f32": 32, "s64": 64,
         "u64": 64, "f64": 64, "c64": 64, "c128": 128}
ENTRY = "ENTRY"  # the name this module gives the entry computation


def count_collectives(hlo_text: str) -> dict[str, int]:
  """How many of each collective the optimised HLO text holds (static).

  A collective inside a rolled loop counts once: see `collectives_executed`.
  """
  counts = dict.fromkeys(COLLECTIVES, 0)
  for match in _OP.finditer(hlo_text):
    counts[match.group(1)] += 1
  return counts


def _bytes(shape: str) -> int:
  """Bytes of an HLO shape: an array `f32[8,3]{1,0}` or a tuple of them."""
  total = 0
  for dtype, dims in _ARRAY.findall(shape):
    bits = _BITS.get(dtype, 8 if dtype.startswith("f8") else 0)
    count = 1
    for dim in filter(None, dims.split(",")):
      count *= int(dim)
    total += count * bits // 8
  return total


def _full_bytes(op: str, result_bytes: int, line: str) -> int:
  """The unsharded size a collective works on, from its result's bytes.

  An all-reduce's and an all-gather's result is the whole array; a
  reduce-scatter's is one of its group's shards, so the array is the result
  times the group's size. On a ring each device sends about 2(N-1)/N of
  this for an all-reduce and (N-1)/N for an all-gather or a reduce-scatter.
  """
  if op != "reduce-scatter":
    return result_bytes
  groups = _GROUPS.search(line)
  if groups is None:
    return result_bytes
  size = (len(groups.group(1).split(",")) if groups.group(1) is not None
          else int(groups.group(2)))
  return result_bytes * size


@dataclasses.dataclass
class _Computation:
  collectives: dict  # op -> count written here
  collective_bytes: dict  # op -> unsharded bytes of those written here
  calls: list  # (callee, times per run: an int, None if unknown, "branch")
  loops: list  # (while body, known trip count or None)
  unknown: list  # why a count through this computation is a lower bound


def computations(hlo_text: str) -> dict[str, _Computation]:
  """Each computation of the HLO module by name; the entry's is `ENTRY`."""
  found, name = {}, None
  for line in hlo_text.splitlines():
    header = _HEADER.match(line)
    if header and not line.startswith(" "):
      name = ENTRY if header.group(1) else header.group(2)
      found[name] = _Computation(dict.fromkeys(COLLECTIVES, 0),
                                 dict.fromkeys(COLLECTIVES, 0), [], [], [])
      continue
    if name is None:
      continue
    if line.startswith("}"):
      name = None
      continue
    _instruction(found[name], name, line)
  return found


def _instruction(comp, name, line):
  """Adds one instruction line's collectives and calls to `comp`."""
  instruction = _INSTRUCTION.match(line)
  op = instruction.group(2) if instruction else ""
  base = op[:-len("-start")] if op.endswith("-start") else op
  if base in COLLECTIVES:
    comp.collectives[base] += 1
    comp.collective_bytes[base] += _full_bytes(
        base, _bytes(instruction.group(1)), line)
  callees = dict(_CALLEE.findall(line))
  callees.pop("to_apply", None)  # a reduction's scalar computation
  if "body" in callees:
    trips = _TRIPS.search(line)
    n = int(trips.group(1)) if trips else None
    comp.loops.append((callees["body"], n))
    comp.calls.append((callees.pop("body"), n))
    if "condition" in callees:
      comp.calls.append((callees.pop("condition"), None if n is None
                         else n + 1))
    if n is None:
      comp.unknown.append(f"a while loop in {name} has no known trip count "
                          "(its body is counted once)")
  branches = [callees.pop(k) for k in ("true_computation",
                                       "false_computation") if k in callees]
  for kind, names in _CALLEE_LIST.findall(line):
    listed = re.findall(r"%?([\w.\-]+)", names)
    if kind == "branch_computations":
      branches += listed
    else:
      comp.calls += [(callee, 1) for callee in listed]
  comp.calls += [(callee, 1) for callee in callees.values()]
  if branches:
    comp.calls += [(callee, "branch") for callee in branches]
    comp.unknown.append(f"a conditional in {name} (its largest branch is "
                        "counted)")


@dataclasses.dataclass
class Executed:
  """What one call of a compiled program executes."""

  collectives: dict  # op -> times executed per call
  collective_bytes: dict  # op -> unsharded bytes per call (`_full_bytes`)
  loops: list  # [{"body": name, "trip_count": n or None}], rolled loops
  unknown: list  # why the counts are lower bounds; empty when exact

  @property
  def all_reduce_bytes(self) -> int:
    """Bytes all-reduced per call (result sizes summed)."""
    return self.collective_bytes["all-reduce"]


def executed(hlo_text: str) -> Executed:
  """Collectives and their bytes one call executes, loops' trips in."""
  comps = computations(hlo_text)
  none = dict.fromkeys(COLLECTIVES, 0)
  if ENTRY not in comps:  # not a module: count what is written
    return Executed(count_collectives(hlo_text), none, [],
                    ["no ENTRY computation: static count"])
  memo, reached = {}, []

  def visit(name, stack=()):
    if name not in memo:
      comp = comps.get(name)
      if comp is None or name in stack:
        return none, none
      reached.append(comp)
      counts, nbytes = dict(comp.collectives), dict(comp.collective_bytes)
      branches = []
      for callee, times in comp.calls:
        inner = visit(callee, stack + (name,))
        if times == "branch":
          branches.append(inner)
          continue
        n = 1 if times is None else times
        counts = {op: counts[op] + n * inner[0][op] for op in COLLECTIVES}
        nbytes = {op: nbytes[op] + n * inner[1][op] for op in COLLECTIVES}
      if branches:
        inner = max(branches, key=lambda b: (sum(b[0].values()),
                                             sum(b[1].values())))
        counts = {op: counts[op] + inner[0][op] for op in COLLECTIVES}
        nbytes = {op: nbytes[op] + inner[1][op] for op in COLLECTIVES}
      memo[name] = counts, nbytes
    return memo[name]

  counts, nbytes = visit(ENTRY)
  loops = [{"body": body, "trip_count": n}
           for comp in reached for body, n in comp.loops]
  unknown = [u for comp in reached for u in comp.unknown]
  return Executed(counts, nbytes, loops, unknown)


def collectives_executed(hlo_text: str) -> dict[str, int]:
  """How many of each collective one call executes (rolled loops' trips).

  Lower bounds where `executed(hlo_text).unknown` says why.
  """
  return executed(hlo_text).collectives


def collectives_by_computation(hlo_text: str, op: str = "all-reduce"
                               ) -> dict[str, int]:
  """How many `op`s each computation holds (static), nonzero only.

  The entry computation is `ENTRY`; anything else holding one is a called
  computation, e.g. a while body where the op runs once per trip.
  """
  return {name: comp.collectives[op] for name, comp in
          computations(hlo_text).items() if comp.collectives[op]}


def memory(compiled) -> dict[str, int]:
  """Temp, argument, output and aliased bytes of a compiled executable.

  On XLA:CPU `peak_memory_in_bytes` excludes temp buffers (docs/jax-facts.md),
  so the four parts are reported rather than a peak.
  """
  stats = compiled.memory_analysis()
  return {
      "temp_bytes": int(stats.temp_size_in_bytes),
      "argument_bytes": int(stats.argument_size_in_bytes),
      "output_bytes": int(stats.output_size_in_bytes),
      "alias_bytes": int(stats.alias_size_in_bytes),
  }


def describe(compiled) -> dict:
  """Collectives and memory of one compiled step.

  `collectives`: written in the HLO (static). `collectives_per_step_executed`:
  executed by one call, rolled loops counted per trip. `all_reduce_bytes`:
  bytes all-reduced by one call. `collective_bytes_per_step`: for each
  collective, the unsharded bytes it works on in one call (`_full_bytes`:
  a sharded state's all-gathers and reduce-scatters against a replicated
  state's all-reduce). `collectives_exact`: False where a loop's
  trip count or a conditional's branch is unknown (then the executed counts
  are lower bounds, and `collectives_note` says where). A step made of several
  calls (optax.MultiSteps) multiplies the per-call figures by its calls.
  """
  text = compiled.as_text()
  run = executed(text)
  return {"collectives": count_collectives(text),
          "collectives_per_step_executed": run.collectives,
          "all_reduce_bytes": run.all_reduce_bytes,
          "collective_bytes_per_step": run.collective_bytes,
          "collectives_exact": not run.unknown,
          "collectives_note": "; ".join(run.unknown),
          "memory": memory(compiled)}


def merged(descriptions):
  """One description of programs that run one after another per step.

  Collectives, bytes and FLOPs add up; each memory figure is the largest of
  the programs' (they do not live at the same time).
  """
  merged = dict(descriptions[0])
  for key in ("collectives", "collectives_per_step_executed"):
    merged[key] = {name: sum(d[key][name] for d in descriptions)
                   for name in descriptions[0][key]}
  merged["all_reduce_bytes"] = sum(d["all_reduce_bytes"] for d in descriptions)
  merged["collective_bytes_per_step"] = {
      name: sum(d["collective_bytes_per_step"][name] for d in descriptions)
      for name in descriptions[0]["collective_bytes_per_step"]}
  merged["collectives_exact"] = all(d["collectives_exact"]
                                    for d in descriptions)
  merged["memory"] = {name: max(d["memory"][name] for d in descriptions)
                      for name in descriptions[0]["memory"]}
  merged["programs"] = len(descriptions)
  return merged
