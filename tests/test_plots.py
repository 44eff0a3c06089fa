"""`--plot` on every strategy's report: the PNG is written, on one screen.

The reports are the measured ones the guide draws from (one per strategy,
`docs/measured/STRATEGY.json`), so every strategy's report shape is drawn
without running it again; tests/test_cli.py runs `--plot` end to end.
"""

import json
import pathlib

import pytest

from compare._src.prove import plots
from shardport import strategies

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(strategies.STRATEGIES))
def test_every_strategy_is_plotted(name, tmp_path):
  report = json.loads((ROOT / "docs" / "measured" / f"{name}.json")
                      .read_text())
  path = tmp_path / f"{name}.png"
  plots.learning_curves(report, str(path),
                        members=name.startswith("ensemble"))
  data = path.read_bytes()
  assert data[:8] == b"\x89PNG\r\n\x1a\n"
  width, height = (int.from_bytes(data[16:20], "big"),
                   int.from_bytes(data[20:24], "big"))
  assert (width, height) == (1200, 800)  # 12 x 8 inches: one screen
