"""Synthetic CoNLL-U files in the format flax's examples/nlp_seq reads.

Each token's XPOS tag is a fixed function of its form, so the tagger has
something to learn; sentences are 3 to 20 tokens, seeded.
"""

import pathlib

import numpy as np

TAGS = ("NN", "NNS", "VB", "VBP", "JJ", "DT", "IN", "PRP", "RB", "CC", ".",
        "CD")


def write(path: pathlib.Path, sentences: int, seed: int,
          vocabulary: int = 200) -> None:
  """Writes `sentences` sentences to `path` (ending in an empty line)."""
  rng = np.random.default_rng(seed)
  lines = []
  for _ in range(sentences):
    for i, word in enumerate(rng.integers(0, vocabulary,
                                          rng.integers(3, 21)), start=1):
      tag = TAGS[word % len(TAGS)]
      lines.append("\t".join([str(i), f"w{word}", f"w{word}", "X", tag, "_",
                              "0", "dep", "_", "_"]))
    lines.append("")
  path.write_text("\n".join(lines) + "\n")
