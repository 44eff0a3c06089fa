"""Every name, path, link and anchor the guide mentions, checked.

Outside fenced blocks, `[[pkg.module.name]]` becomes a link to its file, and
every inline-code reference is checked: project names (`sharded.devices.
placement`) must be defined in the source, library names (`jax.shard_map`)
must import, names struck through (~~`jax.tree_map`~~) must NOT exist (the
guide says they are gone), paths (`sharded/devices.py`) must exist, and so
must the project modules commands run (`python -m bench.runners.dispatch`).
In the built documents every `(#anchor)` link must land on an anchor of its
own document, and every `(OTHER.md#anchor)`, where OTHER.md is another
document `docs.guide.DOCUMENTS` builds (`APPENDIX.md`, `MIGRATION.md`,
`MANY-HOSTS.md`, ...), on one of that document; a `#anchor` that only
another document has names the link to write.
"""

import ast
import importlib
import posixpath
import re

from docs.guide import DOCUMENTS
from docs.guide import OUTPUT
from docs.guide import GuideError
from docs.guide.sources import defines

PROJECT = ("shardport", "legacy_pmap", "sharded", "compare",
           "bench", "examples", "docs")
PATH_ROOTS = (*PROJECT, "tests", ".ci", "constraints")
LIBRARIES = {"jax": "jax", "lax": "jax.lax", "jnp": "jax.numpy",
             "flax": "flax", "jax_utils": "flax.jax_utils", "optax": "optax",
             "orbax": "orbax"}

LINK = re.compile(r"\[\[([\w.]+)\]\]")
_SPAN = re.compile(r"(~~)?`([^`\n]+)`(~~)?")
_NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"^[\w.-]+(?:/[\w.-]+)+/?$")
_COMMAND = re.compile(r"^python -m ([A-Za-z_][\w.]*)")
_MDLINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)")
_ANCHOR_LINK = re.compile(r"\]\(([^()\s#]*)#([\w-]+)\)")
_ANCHOR = re.compile(r"<a id=\"([\w-]+)\"></a>")


def project_file(root, dotted):
  """The source file defining project name `dotted`, or None if undefined."""
  parts = dotted.split(".")
  for i in range(len(parts), 0, -1):
    base = root.joinpath(*parts[:i])
    file = base.with_suffix(".py") if i > 1 or not base.is_dir() else None
    if file is None or not file.is_file():
      file = base / "__init__.py" if (base / "__init__.py").is_file() else None
    if file is None and base.is_dir() and i == len(parts):
      return base  # a namespace directory such as `docs`
    if file is None:
      continue
    body = ast.parse(file.read_text()).body
    for name in parts[i:]:
      node = defines(body, name)
      if node is None:
        return None
      body = node.body if isinstance(node, ast.ClassDef) else []
    return file
  return None


def module_exists(root, dotted):
  """Whether `python -m dotted`, run from `root`, finds a module to run."""
  base = root.joinpath(*dotted.split("."))
  return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()


def library_exists(dotted):
  """Whether `dotted` (e.g. `jax.shard_map`, `lax.pmean`) resolves."""
  first, *rest = dotted.split(".")
  parts = LIBRARIES[first].split(".") + rest
  for i in range(len(parts), 0, -1):
    try:
      obj = importlib.import_module(".".join(parts[:i]))
    except ImportError:
      continue
    try:
      for name in parts[i:]:
        obj = getattr(obj, name)
    except AttributeError:  # removed names raise it, some with a message
      return False
    return True
  return False


def prose_lines(text):
  """(number, line) of every line outside fenced blocks."""
  fenced = False
  for number, line in enumerate(text.splitlines(), 1):
    if line.lstrip().startswith("```"):
      fenced = not fenced
      continue
    if not fenced:
      yield number, line


def check_references(root, text, generated=None):
  """Problems with the names, paths and links in markdown outside fences.

  A link to a file the build writes (`generated`, from the root; by default
  every document's output) is not checked here, as the file may not be
  written yet: `check_anchors` checks it once every document is built.
  """
  generated = [o for _, o in DOCUMENTS] if generated is None else generated
  written = {(root / o).resolve() for o in generated}
  problems = []
  for number, line in prose_lines(text):
    for target in _MDLINK.findall(line):
      path = (root / "docs" / target).resolve()
      if path not in written and not path.exists():
        problems.append(f"line {number}: link to missing {target}")
    for struck, span, _ in _SPAN.findall(line):
      name, command = _NAME.match(span), _COMMAND.match(span)
      if (command and command.group(1).split(".")[0] in PROJECT
          and not module_exists(root, command.group(1))):
        problems.append(f"line {number}: no module {command.group(1)} to run")
      elif (_PATH.match(span) and span.split("/")[0] in PATH_ROOTS
          and not (root / span).exists()):
        problems.append(f"line {number}: no path {span}")
      elif name and name.group(0).split(".")[0] in PROJECT:
        if project_file(root, name.group(0)) is None:
          problems.append(f"line {number}: {name.group(0)} is not defined")
      elif name and name.group(0).split(".")[0] in LIBRARIES:
        if library_exists(name.group(0)) != (not struck):
          claim = "is gone" if struck else "exists"
          problems.append(f"line {number}: the guide says "
                          f"{name.group(0)} {claim}; it does not")
  return problems


def document_link(output, target, documents):
  """The document (its output path) a link `target` in `output` lands on:
  `output` itself for `#anchor`, None when it is not one of `documents`."""
  if not target:
    return output
  path = posixpath.normpath(posixpath.join(posixpath.dirname(output), target))
  return path if path in documents else None


def relative(output, other):
  """How the document `output` links to the document `other`."""
  return posixpath.relpath(other, posixpath.dirname(output))


def check_anchors(text, output=OUTPUT, documents=None):
  """Links in the built `text` (of the document `output`) to no anchor.

  `(#anchor)` must land in `text` itself; `(OTHER.md#anchor)`, where
  OTHER.md is one of `documents` ({output: built text}), in that document.
  A `#anchor` that only another document has names the link to write.
  """
  documents = {**(documents or {}), output: text}
  anchors = {name: set(_ANCHOR.findall(body))
             for name, body in documents.items()}
  problems = []
  for target, name in sorted(set(_ANCHOR_LINK.findall(text))):
    lands = document_link(output, target, documents)
    if lands is None or name in anchors[lands]:
      continue  # another file's anchor (not checked), or found
    if target:
      problems.append(f"link to missing anchor {target}#{name}: {lands} "
                      "has no such anchor")
      continue
    elsewhere = [other for other in documents if name in anchors[other]]
    if elsewhere:
      problems.append(f"link to #{name}, which is in {elsewhere[0]}: link "
                      f"to {relative(output, elsewhere[0])}#{name}")
    else:
      problems.append(f"link to missing anchor #{name}")
  return problems


def link(root, match):
  """`[[pkg.module.name]]` as a markdown link to the file defining it."""
  dotted = match.group(1)
  file = project_file(root, dotted)
  if file is None:
    raise GuideError(f"[[{dotted}]] is not defined")
  return f"[`{dotted}`](../{file.relative_to(root).as_posix()})"
