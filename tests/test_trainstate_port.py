"""The guide's whole TrainState port, bitwise against pmap in 2 x 4.

`docs/trainstate_port.py` (docs/TRAINSTATE-PORT.md) runs a flax Linen
program under pmap and its port from one state on the same batches, the
port stopped and resumed from its Orbax checkpoint, and compares every bit
of every state leaf and metric on each process. tests/test_snippets.py runs
it in one process of 8 devices (the page's block, as pasted, with its
call); here one job of 2 processes x 4 devices (gloo) runs it and then its
wrong twins (tests/trainstate_plants.py), each of which must fail at the
part it breaks. The same job then restores a pmap-era checkpoint
(docs/pmap_checkpoint.py, written here by pmap in one process of 8
devices) through `compare.from_pmap_checkpoint`: every process's restore
must be bitwise this process's own.
"""

import re

from docs import pmap_checkpoint
from docs import trainstate_port
from tests import trainstate_plants
from tests.two_processes import two_processes


def test_the_trainstate_port_is_pmap_bitwise_in_two_processes(tmp_path):
  checkpoint = tmp_path / "pmap_ckpt"  # stacked, a raw key, mid-accumulation
  pmap_checkpoint.pmap_program(str(checkpoint))
  one_process = trainstate_plants.restored_digest(
      str(checkpoint), trainstate_port.process_mesh())
  outs = two_processes("tests.trainstate_plants", tmp_path, "trainstate",
                       "--workdir", tmp_path / "job",
                       "--pmap-checkpoint", checkpoint)
  expected = ["bitwise 24"] + [
      f"plant {name} fails at {part}"
      for name, (_, _, part) in trainstate_plants.PLANTS.items()] + [
          f"pmap checkpoint {one_process}"]
  # gloo prints its connections on stdout too, a line in pieces at times:
  # each of ours ends a line (one write), perhaps after one of its pieces.
  ours = re.compile(r"(bitwise \d+|plant [\w-]+ (?:fails at [\w ]+|passes)"
                    r"|pmap checkpoint [0-9a-f]{64})$")
  assert [[found.group(1) for line in out if (found := ours.search(line))]
          for out in outs] == [expected, expected]
