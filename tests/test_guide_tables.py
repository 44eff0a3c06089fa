"""The guide's tables of jobs and performance, its pasted sections, and the
provenance lines and list of sources of its figures and tables.

Each renderer is fed a small record written here, including the failures a
reader must see (digests that differ, a job that failed), so that a table
cannot hide them; the real records under docs/measured are rendered by the
guide's build (tests/test_guide.py).
"""

import json

import pytest

from docs import build_guide as guide
from docs.guide import DOCUMENTS
from docs.guide import GuideError
from docs.guide import MEASURED
from docs.guide import figures
from docs.guide import jobs
from docs.guide import scaling


def _write(root, name, record):
  folder = root / MEASURED
  folder.mkdir(parents=True, exist_ok=True)
  base = {"date": "2026-01-02T03:04:05", "jax_version": "0.10.2",
          "load_average_after": 1.5, "workload": "the CNN on digits"}
  (folder / f"{name}.json").write_text(json.dumps({**base, **record}))


def _run(rate, base, same=True):
  return {"examples_per_s": rate, "baseline_examples_per_s": base,
          "examples_per_s_ratio": rate / base, "plain_examples_per_s": 3 * base,
          "same_state_digest": same, "state_digest": "ab" * 32}


def _many_hosts(same):
  runs = {"pmap": _run(90.0, 100.0), "shard_map": _run(70.0, 100.0, same)}
  return {"strategies": {"data_parallel": {
      "job_command": "python -m compare --processes 2", "runs": runs,
      "same_state_digests": same}}}


def test_many_hosts_table_counts_the_target_and_shows_every_digest(tmp_path):
  _write(tmp_path, "many_hosts", _many_hosts(same=True))
  text = jobs.many_hosts_table(tmp_path)
  assert "| data_parallel | pmap | 90 | 100 | 0.90 | 300 | equal |" in text
  assert "1 of 2 runs reach 0.8" in text
  assert "every state digest is equal" in text
  assert "2026-01-02" in text and "load average 1.5" in text


def test_many_hosts_table_says_when_a_digest_differs(tmp_path):
  _write(tmp_path, "many_hosts", _many_hosts(same=False))
  text = jobs.many_hosts_table(tmp_path)
  assert "**differs**" in text and "is **not** equal" in text


def _job(digest, legs=1, code=0):
  leg = {"state_digest": digest, "test_accuracy": 0.95, "steps_per_s": 50.0,
         "save_s": 0.02, "save_s_max": 0.05, "restore_s": 0.3,
         "checkpoint_every": 50}
  job = {"commands": ["python -m legacy_pmap.train"] * legs, "exit": code}
  if code == 0:
    job.update(legs=[leg] * legs, state_digest=digest, test_accuracy=0.95)
  return job


def test_handover_tables_show_digests_failures_and_costs(tmp_path):
  _write(tmp_path, "handover", {"strategies": {"data_parallel": {
      "pmap_200": _job("1" * 64), "shard_map_200": _job("1" * 64),
      "pmap_100_shard_map_200": _job("2" * 64, legs=2),
      "shard_map_100_pmap_200": _job(None, legs=2, code=2)}}})
  text = jobs.handover_table(tmp_path)
  assert "| data_parallel | pmap → shard_map | `2222222222222222` |" in text
  assert "| shard_map → pmap | exit 2 |" in text
  cost = jobs.checkpoint_cost_table(tmp_path)
  # 20 ms blocking of 50 steps at 20 ms a step: 2% of the time between saves
  assert "| data_parallel | shard_map | 20 | 50 | 20.0 | 2.0% | 0.30 |" in cost


def test_a_missing_record_says_how_to_measure_it(tmp_path):
  with pytest.raises(GuideError, match="--measure handover"):
    jobs.handover_table(tmp_path)


def test_ensemble_runs_table_gives_each_run_and_the_median(tmp_path):
  def run(median):
    return {"exit": 0, "ratio": {"median": median, "quartiles": [0.9, 1.1]},
            "examples_per_s": {"pmap": 100.0, "shard_map": 100.0 * median},
            "pmap_shard_map": ["bitwise", "bitwise"], "verdict": "pass"}
  _write(tmp_path, "ensemble_runs", {
      "command_line": "python -m compare --strategy ensemble",
      "runs": [run(0.98), run(1.04), {"exit": 1}],
      "median_of_medians": 1.01})
  text = scaling.ensemble_runs_table(tmp_path)
  assert "| 2 | 1.040 | 0.900–1.100 | 100 | 104 | bitwise, bitwise; pass |" \
      in text
  assert "| 3 | exit 1 |" in text and "**1.010**" in text


def test_sweep_table_has_every_point_and_its_curve(tmp_path):
  point = {"devices": 2, "verdict": "pass", "runs": {"pmap": {
      "examples_per_s": 500.0, "examples_per_s_spread": [450.0, 550.0],
      "compile_s": 1.25, "all_reduce_bytes": 2048,
      "collective_bytes_per_step": {"all-gather": 1024,
                                    "reduce-scatter": 512}}}}
  _write(tmp_path, "sweep", {"strategies": {
      "data_parallel": {"exit": 0, "command": "python -m compare --sweep",
                        "plot": "sweep_data_parallel.png", "sweep": [point]},
      "ensemble": {"exit": 3}}})
  text = scaling.sweep_table(tmp_path)
  assert "| 2 | pmap | 500 | 450–550 | 1.25 | 2.0 | 1.5 | pass |" in text
  assert "(measured/sweep_data_parallel.png)" in text
  assert "**ensemble**: the sweep failed (exit 3)" in text


def test_report_figures_give_window_ratios_and_share_of_peak():
  report = {"peak_gflops": 100.0, "runs": {
      "pmap": {"window_examples_per_s": [100.0, 100.0, 100.0],
               "achieved_gflops": 25.0},
      "jit": {"window_examples_per_s": [90.0, 110.0, 95.0]}}}
  values = figures.ReportSource("r", report).values()
  assert values["ratio"]["jit_over_pmap"] == pytest.approx(0.95)
  assert values["run"]["pmap"]["share_of_peak"] == pytest.approx(0.25)
  assert "share_of_peak" not in values["run"]["jit"]


@pytest.mark.parametrize("name", [t for t, _ in DOCUMENTS])
def test_a_part_is_pasted_without_its_title_and_must_exist(tmp_path, name):
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs/part.md").write_text("# Title\n\nBody `x`.\n")
  template = tmp_path / name
  with pytest.raises(GuideError, match="no such template"):
    guide.template_text(tmp_path, name)
  template.write_text("## A\n\n<!-- part: docs/part.md -->\n\nafter\n")
  assert guide.template_text(tmp_path, name) == (
      "## A\n\nBody `x`.\n\nafter\n")
  template.write_text("<!-- part: docs/missing.md -->\n")
  with pytest.raises(GuideError, match="no such file"):
    guide.template_text(tmp_path, name)


def test_the_provenance_line_names_each_file_once_and_links_its_entry():
  report = figures.ReportSource("data_parallel", {
      "strategy": "data_parallel", "devices": 8, "platform": "cpu"})
  found = {"data_parallel": report,
           "traps": figures.TrapsSource("traps", {"devices": 8,
                                                  "platform": "cpu"}),
           "gpu": figures.Source("gpu", {"devices": 1, "platform": "gpu"}),
           "verdicts": figures.Source("verdicts", {"workload": "8 runs"})}
  assert figures.note(["data_parallel", "traps", "data_parallel"], found,
                      "APPENDIX.md") == (
      "*Measured: [data_parallel](APPENDIX.md#src-data-parallel), "
      "[traps](APPENDIX.md#src-traps) (8 emulated CPU devices).*")
  assert figures.note(["gpu"], found) == (
      "*Measured: [gpu](#src-gpu) (1 GPU device; what ran, when, and how "
      "to measure again: see it).*")
  # devices not recorded, or not the same: each entry says
  for names in (["verdicts"], ["gpu", "traps"], ["traps", "verdicts"]):
    assert "(what ran, when" in figures.note(names, found)


def test_the_list_of_sources_has_each_file_once_with_every_workload():
  found = {"traps": figures.TrapsSource("traps", {
      "date": "2026-01-02T03:04:05", "jax_version": "0.10.2",
      "command": "python -m docs.build_guide --measure traps", "traps": {
          "a_trap": {"label": "A", "workload": "a on 8 devices"},
          "b_trap": {"label": "B", "workload": "b on 1 device"}}}),
           "errors": figures.Source("errors", {"what": "first lines."})}
  listed = figures.sources_list(None, {"errors": None, "traps": None}, found)
  assert listed.splitlines() == [
      '- <a id="src-errors"></a>**errors** ([`docs/measured/errors.json`]'
      "(measured/errors.json)): first lines. jax ?, measured date not "
      "recorded with `python -m docs.build_guide --measure errors`.",
      '- <a id="src-traps"></a>**traps** ([`docs/measured/traps.json`]'
      "(measured/traps.json)): jax 0.10.2, measured 2026-01-02 with "
      "`python -m docs.build_guide --measure traps`; what ran:",
      "  - **A**: a on 8 devices.", "  - **B**: b on 1 device."]


def test_a_table_names_the_files_it_does_not_say_it_comes_from(tmp_path):
  _write(tmp_path, "many_hosts", _many_hosts(same=True))
  text, unnamed = guide._directive(tmp_path, "table", "many-hosts")  # pylint: disable=protected-access
  assert "(measured/many_hosts.json)" in text and unnamed == []
  _write(tmp_path, "dispatch", {"devices": 8, "platform": "cpu", "sizes": {
      "tiny": {"features": 4, "examples_per_device": 2, "runs": {
          name: {"us_per_call": 10.0, "us_per_call_spread": [9.0, 11.0],
                 "window_us_per_call": [10.0, 10.0]}
          for name in ("pmap", "shard_map")}}}})
  text, unnamed = guide._directive(tmp_path, "table", "dispatch")  # pylint: disable=protected-access
  assert "| tiny: 4 features, 2 examples/device | 10 (9–11) |" in text
  assert unnamed == ["dispatch"]
  assert guide._directive(tmp_path, "table", "tolerances")[1] == []  # pylint: disable=protected-access


def test_the_grid_tables_list_every_planned_run_and_say_what_failed(
    monkeypatch):
  from docs.guide import grid  # pylint: disable=g-import-not-at-top
  files = {
      "verdict_grid": {"correct": {
          "data_parallel_digits_10": {"max_ratio": 1.5, "verdict": "pass",
                                      "flip_steps": {}},
          "accumulation_digits_12": {"max_ratio": 12.0, "verdict": "fail",
                                     "flip_steps": {}}},
                       "detection": {"data_parallel_at_20": {
                           "first_fail_step": 20, "max_ratio": 221.4}}},
      "verdict_grid_original": {"correct": {
          "accumulation_digits_12": {"max_ratio": 88.7, "verdict": "pass",
                                     "flip_steps": {"pmap~reference": [10]}}},
                                "detection": {}}}
  monkeypatch.setattr(grid, "load", lambda root, name: files[name])
  correct = grid.correct_table(None)
  assert ("| data_parallel, 10 steps | 1.50, pass | not measured | "
          "not measured | not measured |") in correct
  # A failing correct run is shown failing, not dropped or passed.
  assert ("| accumulation, 12 steps | 12.00, fail | - | 88.70, pass; a flip "
          "excused at step 10 | - |") in correct
  assert ("| accumulation, 1000 steps | not measured | not measured | "
          "not measured | not measured |") in correct
  detection = grid.detection_table(None)
  assert ("| data_parallel, N = 20 | not measured | 20 (221x) | "
          "not measured | not measured |") in detection
  assert "| data_parallel_grad_0.2pct, N = 120 | not measured | - |" in (
      detection)
  assert "| fsdp | not measured | not measured |" in grid.devices_table(None)
