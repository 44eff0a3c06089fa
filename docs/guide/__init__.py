"""The guide's builder, by concern (`python -m docs.build_guide` runs it).

- `sources`: tagged regions, definitions and diffs pulled from the code.
- `references`: every name, path, link and anchor the guide mentions, checked.
- `figures`: the measurement files and the `{{...}}` figures drawn from them.
- `tables`: the tables rendered from the registry and the measurements.

The guide is documents built the same way (`DOCUMENTS`), which link to each
other: the core a team acts on (`TEMPLATE` -> `OUTPUT`), its appendix (the
harness, the measured reports, the internals) and the pages the appendix
links to (`PAGES`: many hosts, moving a running job, beyond one axis, the
rewrite, more idioms, the team programs, the whole TrainState port), each
a document of its own outside the guide's length.

`--measure TARGET`, which regenerates a measurement file, is
`bench.measure`: measuring is bench's concern, the guide only reads the
files.
"""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
# (template, output) of each document, from the repository root; all in
# docs/, so that one links to another by its file name.
DOCUMENTS = (("docs/MIGRATION.template.md", "docs/MIGRATION.md"),
             ("docs/APPENDIX.template.md", "docs/APPENDIX.md"),
             ("docs/many-hosts.template.md", "docs/MANY-HOSTS.md"),
             ("docs/moving-a-running-job.template.md", "docs/MOVING-A-RUNNING-JOB.md"),
             ("docs/beyond-one-axis.template.md", "docs/BEYOND-ONE-AXIS.md"),
             ("docs/rewrite.template.md", "docs/REWRITE.md"),
             ("docs/more-idioms.template.md", "docs/MORE-IDIOMS.md"),
             ("docs/team-programs.template.md", "docs/TEAM-PROGRAMS.md"),
             ("docs/trainstate-port.template.md", "docs/TRAINSTATE-PORT.md"))
TEMPLATE, OUTPUT = DOCUMENTS[0]  # the core
APPENDIX_TEMPLATE, APPENDIX = DOCUMENTS[1]
PAGES = DOCUMENTS[2:]  # linked from the appendix; not part of the guide
GUIDE = (OUTPUT, APPENDIX)  # what a reader of the guide reads through
MEASURED = "docs/measured"


class GuideError(ValueError):
  """A tag, name, path, figure or directive a template names is wrong.

  Raised without the template's name by the parts of the builder; the build
  puts the name of the template it was building in front.
  """
