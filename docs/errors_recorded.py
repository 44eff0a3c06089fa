"""The error index's rows quoted from this repository's notes, not run.

`docs.errors` runs every other row; these cost too much to raise (a fixed
timeout, an abort after 40 s that not every run meets). `RECORDED` is
re-exported there; tests/test_error_messages.py checks each quote is still
its source's text, word for word.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Recorded:
  """A wrong idiom whose message is quoted from this repository's notes.

  Not run here, nor by the tests: raising it costs too much (`why`). The
  quote is `source`'s text, verbatim (the test checks that it still is).
  """

  id: str
  idiom: str
  fix: str
  message: str  # verbatim from `source`, elisions (`...`) included
  source: str  # the file under the repository root that records it
  why: str  # why it is not run


RECORDED = (
    Recorded("gloo-context", "2 processes whose first collective comes more "
             "than about 30 s apart (one compiled slower)",
             "#many-processes",
             "Gloo context initialization failed: ... GetKeyValue() timed out",
             "docs/many-hosts.template.md",
             "it takes gloo's fixed timeout of about 30 s to raise"),
    Recorded("cpu-rendezvous", "on emulated CPU devices, many steps with "
             "collectives queued without reading a result (the pmap "
             "tutorial's loop)", "#prove",
             "Expected 8 threads to join the rendezvous, but only 7 of them "
             "arrived on time.", "docs/jax-facts.md",
             "it aborts the process after 40 s, and not in every run"),
)
