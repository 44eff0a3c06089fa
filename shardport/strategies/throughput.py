"""A pair of runs' examples/s, window by window: `throughput_ratio`."""

import statistics


def throughput_ratio(report: dict) -> dict | None:
  """shard_map's examples/s over pmap's, window by window, when both ran.

  Each timing window times both runs back to back, so the ratio within a
  window cancels the machine's slow drifts; the median and quartiles over
  windows are far steadier than a ratio of two medians (measured on 2 cores
  with 8 emulated devices: quartiles within ~5%, where per-run spreads
  reach 30%).
  """
  runs = report["runs"]
  legacy, port = report.get("throughput_pair", ("pmap", "shard_map"))
  if legacy not in runs or port not in runs:
    return None
  ratios = [b / a for a, b in zip(runs[legacy]["window_examples_per_s"],
                                  runs[port]["window_examples_per_s"])]
  if not ratios:
    return None
  quartiles = (statistics.quantiles(ratios, n=4) if len(ratios) > 1
               else [ratios[0]] * 3)
  return {"median": statistics.median(ratios),
          "quartiles": [quartiles[0], quartiles[2]]}
