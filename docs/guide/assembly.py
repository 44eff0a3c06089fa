"""How a document's text is assembled: its notes left out, sections kept in
files of their own pasted in (`<!-- part: PATH -->`), and its contents list.
"""

import re

from docs.guide import GuideError

_HEADING = re.compile(r"^(##|###) <a id=\"([\w-]+)\"></a>(.*)$", re.M)


def contents(text):
  """A list of the document's sections, one line each with its
  subsections after it, titled as their headings are (with their own
  numbers: `4.1`, `A1`, or none)."""
  sections = []
  for level, anchor, title in _HEADING.findall(text):
    if anchor == "contents":
      continue
    if level == "##" or not sections:
      sections.append([f"[{title.strip()}](#{anchor})", []])
    else:
      sections[-1][1].append(f"[{title.strip()}](#{anchor})")
  return "\n".join(
      f"- {head}" + (": " + " · ".join(subs) if subs else "")
      for head, subs in sections)


# A comment that starts a line and is not a directive: a note for whoever
# opens the file.
_NOTE = re.compile(r"<!--(?!\s*(?:(?:code|excerpt|diff|table|link-if-exists|part)"
                   r"\s*:|(?:programs|figures|toc)\s*-->))")


def strip_notes(text):
  """`text` without its notes to whoever opens the file: each HTML comment
  that starts a line outside a fenced block and is not a directive, with
  the blank line it would leave."""
  out, fenced, dropped = [], False, False
  lines = iter(text.split("\n"))
  for line in lines:
    if not fenced and _NOTE.match(line):
      body = line[len("<!--"):]
      while "-->" not in body:  # a note over several lines
        body = next(lines, None)
        if body is None:
          raise GuideError("a note (`<!--` that is not a directive) never "
                           "ends (`-->`)")
      line = body.split("-->", 1)[1]
      if not line.strip():
        dropped = True
        continue
    elif dropped and not line.strip() and (not out or not out[-1].strip()):
      dropped = False  # the blank line the note leaves
      continue
    dropped = False
    if line.lstrip().startswith("```"):
      fenced = not fenced
    out.append(line)
  return "\n".join(out)


def part(root, path):
  """A section kept in its own file: its text without its `# ` title and
  without its notes to whoever opens the file (`strip_notes`)."""
  file = root / path
  if not file.is_file():
    raise GuideError(f"<!-- part: {path} -->: no such file")
  lines = file.read_text().rstrip("\n").splitlines()
  text = "\n".join(lines[1:] if lines and lines[0].startswith("# ")
                   else lines)
  return strip_notes(text).strip("\n")
