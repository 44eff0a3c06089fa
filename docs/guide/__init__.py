"""The guide's builder, by concern (`python -m docs.build_guide` runs it).

- `sources`: tagged regions, definitions and diffs pulled from the code.
- `references`: every name, path, link and anchor the guide mentions, checked.
- `figures`: the measurement files and the `{{...}}` figures drawn from them.
- `tables`: the tables rendered from the registry and the measurements.

`--measure TARGET`, which regenerates a measurement file, is
`bench.measure`: measuring is bench's concern, the guide only reads the
files.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = "docs/MIGRATION.template.md"
OUTPUT = "docs/MIGRATION.md"
MEASURED = "docs/measured"


class GuideError(ValueError):
  """A tag, name, path, figure or directive the template names is wrong."""
