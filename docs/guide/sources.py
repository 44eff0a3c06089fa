"""Code pulled into the guide: tagged regions, definitions, and diffs of them.

A region is `# region: TAG` ... `# endregion` in a source file; a definition
is a def, class or assignment (`Cls.method` for nested ones).
"""

import ast
import difflib
import re
import textwrap

from docs.guide import GuideError

_REGION = re.compile(r"^\s*# region: ([\w.-]+)\s*$")
_ENDREGION = re.compile(r"^\s*# endregion\b")


def regions(path) -> dict[str, str]:
  """Every tagged region of a source file, dedented, by tag."""
  found, tag, lines = {}, None, []
  for number, line in enumerate(path.read_text().splitlines(), 1):
    if _REGION.match(line):
      if tag is not None:
        raise GuideError(f"{path}:{number}: region inside region {tag!r}")
      tag, lines = _REGION.match(line).group(1), []
      if tag in found:
        raise GuideError(f"{path}:{number}: duplicate region {tag!r}")
    elif _ENDREGION.match(line):
      if tag is None:
        raise GuideError(f"{path}:{number}: endregion without region")
      found[tag], tag = textwrap.dedent("\n".join(lines)).strip("\n"), None
    elif tag is not None:
      lines.append(line)
  if tag is not None:
    raise GuideError(f"{path}: region {tag!r} never ends")
  return found


def defines(tree_body, name):
  """The statement in `tree_body` that binds `name`, if any."""
  for node in tree_body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)) and node.name == name:
      return node
    targets = []
    if isinstance(node, ast.Assign):
      targets = [t for target in node.targets
                 for t in ast.walk(target) if isinstance(t, ast.Name)]
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target,
                                                        ast.Name):
      targets = [node.target]
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      if any((a.asname or a.name).split(".")[0] == name for a in node.names):
        return node
    elif isinstance(node, (ast.If, ast.Try)):
      inner = defines(node.body, name)
      if inner is not None:
        return inner
    if any(t.id == name for t in targets):
      return node
  return None


def definition(file, dotted):
  """The source of the def, class or assignment `dotted` (`Cls.method`)."""
  text = file.read_text()
  node, body = None, ast.parse(text).body
  for name in dotted.split("."):
    node = defines(body, name)
    if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Assign,
                             ast.AnnAssign)):
      return None
    body = getattr(node, "body", [])
  first = min([node.lineno] + [d.lineno for d in getattr(
      node, "decorator_list", [])])
  lines = text.splitlines()[first - 1:node.end_lineno]
  return textwrap.dedent("\n".join(lines))


def source(root, ref):
  """The text `PATH`, `PATH#TAG` or `PATH::NAME` names, and a link to it."""
  path, _, tag = ref.partition("#")
  path, _, name = path.partition("::")
  file = root / path
  if not file.is_file():
    raise GuideError(f"no file {path}")
  text = file.read_text().rstrip("\n")
  if tag:
    # `A+B`: the regions one after another, so a block that calls a helper
    # shown once elsewhere on the page still runs pasted alone.
    found = regions(file)
    for one in tag.split("+"):
      if one not in found:
        raise GuideError(f"no region {one!r} in {path}")
    text = "\n\n\n".join(found[one] for one in tag.split("+"))
  elif name:
    text = definition(file, name)
    if text is None:
      raise GuideError(f"no def, class or assignment {name} in "
                       f"{path}")
  tags = " + ".join(f"`{one}`" for one in tag.split("+"))
  label = (f"`{path}`" + (f" (region {tags})" if tag else "")
           + (f" `{name}`" if name else ""))
  return text, f"[{label}](../{path})"


def code(root, ref, excerpt=False):
  """`<!-- code: REF -->`: the source as a python block under its link.

  `<!-- excerpt: REF -->` (`excerpt`): the link line says the block runs in
  its file only; every other block runs pasted after its page's imports
  (`tests/test_snippets.py`).
  """
  text, link = source(root, ref)
  note = ", an excerpt (it runs in its file)" if excerpt else ""
  return f"{link}{note}:\n\n```python\n{text}\n```"


def diff(root, args):
  """`<!-- diff: OLD NEW -->`: the whole of both, changed lines marked."""
  refs = args.split()
  if len(refs) != 2:
    raise GuideError(f"diff takes two sources, got {args!r}")
  (old, old_link), (new, new_link) = (source(root, r) for r in refs)
  old_lines, new_lines = old.splitlines(), new.splitlines()
  # Full context: the reader sees the whole region, changes marked -/+.
  lines = list(difflib.unified_diff(old_lines, new_lines, lineterm="",
                                    n=max(len(old_lines), len(new_lines))))
  body = "\n".join(lines[3:]) if lines else textwrap.indent(old, " ")
  return f"{old_link} (`-`) → {new_link} (`+`):\n\n```diff\n{body}\n```"
