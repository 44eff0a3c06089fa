"""Figures drawn from the measurement files, never typed by hand.

A figure in the template is `{{SOURCE/GROUP/.../KEY:FORMAT UNIT}}`:
SOURCE is a file `docs/measured/SOURCE.json`, the rest a path into it,
FORMAT a Python format spec and UNIT text put after the number. It renders
as the number and its unit; the build ends each section that shows figures
with one provenance line (`note`) naming each measurement file they come
from, linked to the file's entry in the list of sources (`<!-- figures -->`,
`sources_list`), which says what ran, when and how to measure it again.

    {{traps/scan_trap/slowdown:.0f ×}}           a trap's fact
    {{dispatch/tiny/pmap_over_jit:.0%}}          a dispatch ratio
    {{data_parallel/pair/shard_map~reference/first_step/max_abs:.0e}}
    {{data_parallel/run/shard_map/memory/alias_mib:.2f MiB}}

A number with a unit typed into the template's prose (`6×`, `1.4 MiB`,
`4e-7`) is a figure nobody re-measures: `unbacked` finds them, and the build
fails on them.
"""

import json
import re
import statistics

from docs.guide import MEASURED
from docs.guide import GuideError
from docs.guide.references import prose_lines

FIGURE = re.compile(r"\{\{([^{}:\s]+)(?::(\S*))?(?: ([^{}]*))?\}\}")
# Inline code, links' targets, HTML comments and figures are not prose.
_NOT_PROSE = re.compile(r"`[^`]*`|\]\([^)]*\)|<!--.*?-->|\{\{[^{}]*\}\}|"
                        r"<[^>]*>")
_UNITS = (r"×|x\b|%|MiB|MB|KiB|KB|GiB|GB|ms|µs|us\b|s\b|ns\b|GFLOP|"
          r"steps/s|examples/s|ULPs?\b|ulps?\b")
_TYPED = re.compile(r"(?<![\w.§/-])(~?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?)"
                    rf"(?:\s?(?:{_UNITS})|(?<=\d)e-?\d+)")
_SCIENTIFIC = re.compile(r"(?<![\w.])\d(?:\.\d+)?e-?\d+\b")
MIB = 2 ** 20


def unbacked(text):
  """Figures typed into the template's prose instead of measured."""
  problems = []
  for number, line in prose_lines(text):
    prose = _NOT_PROSE.sub(" ", line)
    for match in list(_TYPED.finditer(prose)) + list(
        _SCIENTIFIC.finditer(prose)):
      problems.append(f"line {number}: {match.group(0).strip()!r} is typed "
                      "by hand; draw it from a measurement ({{...}})")
  return sorted(set(problems))


def _snake(key):
  return re.sub(r"\W+", "_", str(key)).strip("_").lower()


def _ratios(a, b):
  """Median of window-by-window ratios a/b (each window timed both)."""
  return statistics.median(x / y for x, y in zip(a, b))


class Source:
  """One measurement file: its groups' workloads and a path to every value."""

  def __init__(self, name, data):
    self.name, self.data = name, data

  def group(self, path):  # the workload a path was measured on
    return self.name

  def groups(self):  # every workload the file holds
    return [self.name]

  def devices(self):
    """The devices it ran on ('8 emulated CPU devices'), or None."""
    count, platform = self.data.get("devices"), self.data.get("platform")
    if not isinstance(count, int) or not platform:
      return None
    if platform == "cpu":  # more than one CPU device is always emulated
      return f"{count} emulated CPU device{'s' * (count != 1)}"
    return f"{count} {platform.upper()} device{'s' * (count != 1)}"

  def label(self, group):
    return self.name

  def workload(self, group):
    return self.data.get("workload", "")

  def values(self):
    return self.data

  def lookup(self, path):
    value = self.values()
    for key in path:
      if isinstance(value, list) and key.isdigit() and int(key) < len(value):
        value = value[int(key)]
      elif isinstance(value, dict) and key in value:
        value = value[key]
      else:
        raise KeyError("/".join(path))
    return value


class TrapsSource(Source):
  """docs/measured/traps.json: `traps/TRAP/FACT`."""

  def group(self, path):
    return path[0]

  def groups(self):
    return list(self.data["traps"])

  def label(self, group):
    return self.data["traps"][group]["label"]

  def workload(self, group):
    return self.data["traps"][group]["workload"]

  def values(self):
    return {name: {_snake(k): v for k, v in trap["facts"].items()}
            for name, trap in self.data["traps"].items()}


class DispatchSource(Source):
  """docs/measured/dispatch.json: `dispatch/SIZE/RUN` (µs per call) and
  `dispatch/SIZE/A_over_B` (window-by-window median ratio of times)."""

  def group(self, path):
    return path[0]

  def groups(self):
    return list(self.data["sizes"])

  def label(self, group):
    return f"{group} SGD step"

  def workload(self, group):
    size = self.data["sizes"][group]
    return (f"data-parallel SGD step of a linear model, {size['features']} "
            f"features, {size['examples_per_device']} examples per device, "
            f"{self.data['devices']} {self.data['platform']} devices, "
            "each call waited for")

  def values(self):
    out = {}
    for size, entry in self.data["sizes"].items():
      runs = entry["runs"]
      out[size] = {name: run["us_per_call"] for name, run in runs.items()}
      for a in runs:
        for b in runs:
          if a != b:
            out[size][f"{a}_over_{b}"] = _ratios(
                runs[a]["window_us_per_call"], runs[b]["window_us_per_call"])
    return out


class ReportSource(Source):
  """A `python -m compare --json` report: `S/run/RUN/KEY`,
  `S/run/RUN/memory/KEY_mib`, `S/run/RUN/memory/unaliased_bytes` (output
  less aliased), `S/run/RUN/share_of_peak` (achieved over the
  probed peak), `S/ratio/A_over_B` (examples/s, median of window-by-window
  ratios), `S/pair/A~B/AT/KEY`, `S/KEY`."""

  def label(self, group):
    d = self.data
    return f"{d.get('strategy', self.name)}: {d.get('workload')} on " \
           f"{d.get('dataset')}"

  def workload(self, group):
    d = self.data
    return (f"`python -m compare --strategy {d.get('strategy', self.name)}`"
            f": {d.get('workload')} on {d.get('dataset')}, global batch "
            f"{d.get('global_batch')}, {d.get('steps')} steps, "
            f"{d.get('devices')} {d.get('platform')} devices")

  def values(self):
    out = dict(self.data)
    out["run"] = {}
    for name, run in self.data.get("runs", {}).items():
      run = dict(run)
      memory = run.get("memory", {})
      run["memory"] = {**memory, **{
          f"{k.removesuffix('_bytes')}_mib": v / MIB
          for k, v in memory.items() if isinstance(v, (int, float))}}
      if {"output_bytes", "alias_bytes"} <= set(memory):
        run["memory"]["unaliased_bytes"] = (memory["output_bytes"]
                                            - memory["alias_bytes"])
      out["run"][name] = run
    out["ratio"] = {
        f"{a}_over_{b}": _ratios(ra["window_examples_per_s"],
                                 rb["window_examples_per_s"])
        for a, ra in self.data.get("runs", {}).items()
        for b, rb in self.data.get("runs", {}).items()
        if a != b and ra.get("window_examples_per_s")
        and rb.get("window_examples_per_s")}
    peak = self.data.get("peak_gflops")
    for run in out["run"].values():
      if peak and run.get("achieved_gflops"):
        run["share_of_peak"] = run["achieved_gflops"] / peak
    out["pair"] = {}
    for v in self.data.get("equivalence", []):
      out["pair"].setdefault(f"{v['a']}~{v['b']}", {})[v["at"]] = v
    return out


_KINDS = {"traps": TrapsSource, "dispatch": DispatchSource,
          **dict.fromkeys(("errors", "verdicts", "handover", "many_hosts",
                           "sweep", "ensemble_runs", "lockstep", "verdict_grid",
                           "verdict_grid_original", "rewrite", "jit_ports",
                           "team_programs", "real_programs",
                           "real_programs_global", "rewrite_examples",
                           "rewrite_global", "rewrite_tfdata"),
                          Source)}
# Anything else under docs/measured/ is a `python -m compare` report.


def sources(root):
  """Every measurement file under `root`, by name."""
  found = {}
  for file in sorted((root / MEASURED).glob("*.json")):
    data = json.loads(file.read_text())
    kind = _KINDS.get(file.stem, ReportSource)
    found[file.stem] = kind(file.stem, data)
  return found


def anchor(name):
  """The anchor of a measurement file's entry in the list of sources."""
  return "src-" + re.sub(r"[\W_]+", "-", name).strip("-").lower()


def render(root, text, used=None, found=None):
  """`text` with every `{{...}}` figure drawn from its measurement.

  The name of each measurement file a figure comes from is added to `used`
  (a dict, in first-use order) for the section's provenance line.
  """
  found = sources(root) if found is None else found

  def one(match):
    path, spec, unit = match.group(1), match.group(2) or "", match.group(3)
    name, *rest = path.split("/")
    if name not in found:
      raise GuideError(f"figure {{{{{path}}}}}: no measurement "
                       f"{MEASURED}/{name}.json (run `python "
                       f"-m docs.build_guide --measure {name}`)")
    source = found[name]
    try:
      value = source.lookup(rest)
    except (KeyError, IndexError, TypeError):
      raise GuideError(f"figure {{{{{path}}}}} is not in "
                       f"{MEASURED}/{name}.json") from None
    try:
      shown = format(value, spec)
    except (TypeError, ValueError):
      raise GuideError(f"figure {{{{{path}}}}}: cannot format "
                       f"{value!r} as {spec!r}") from None
    if used is not None:
      used.setdefault(name, None)
    unit = f" {unit}" if unit and unit[0].isalpha() else (unit or "")
    return f"{shown}{unit}"

  return FIGURE.sub(one, text)


NOTE = "*Measured: "  # how every provenance line starts


def note(names, found, where=""):
  """One provenance line: each measurement file in `names` once, linked to
  its entry in the list of sources (`where`: the document holding it, as
  linked from the note's document; "" when it is the same). Only the list's
  own document says what its entries hold (what ran, when, and how to
  measure again): the guide's other pages, the core first, link to it."""
  names = list(dict.fromkeys(names))
  links = ", ".join(f"[{name}]({where}#{anchor(name)})" for name in names)
  devices = {found[name].devices() for name in names}
  ran = devices.pop() if len(devices) == 1 and None not in devices else ""
  if where:
    return f"{NOTE}{links}{f' ({ran})' if ran else ''}.*"
  see = "see each" if len(names) > 1 else "see it"
  ran = f"{ran}; " if ran else ""
  return (f"{NOTE}{links} ({ran}what ran, when, and how to measure again: "
          f"{see}).*")


def _when(data):
  value = data.get("date")
  commit = f" on commit {data['commit']}" if data.get("commit") else ""
  return (str(value)[:10] if value else "date not recorded") + commit


def _workload(source, group):
  text = source.workload(group) or source.data.get("what") or ""
  return text.rstrip(".")


def sources_list(root, used, found=None):
  """`<!-- figures -->`: each measurement file a figure, or a table's note,
  comes from, once (`used`: the names, in first-use order), with every
  workload it holds."""
  found = sources(root) if found is None else found
  lines = []
  for name in used:
    source = found[name]
    data = source.data
    command = data.get("command", f"python -m docs.build_guide --measure "
                                  f"{name}")
    head = (f"- <a id=\"{anchor(name)}\"></a>**{name}** "
            f"([`{MEASURED}/{name}.json`](measured/{name}.json))")
    when = (f"jax {data.get('jax_version', '?')}, measured {_when(data)} "
            f"with `{command}`")
    groups = source.groups()
    if groups == [name]:
      workload = _workload(source, name)
      lines.append(f"{head}: {workload + '. ' if workload else ''}{when}.")
      continue
    lines.append(f"{head}: {when}; what ran:")
    lines.extend(f"  - **{source.label(group)}**: "
                 f"{_workload(source, group)}." for group in groups)
  return "\n".join(lines) if lines else "*No figures.*"
