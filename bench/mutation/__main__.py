"""`python -m bench.mutation`: the mutation bench (`mutate`)."""

import sys

from bench.mutation import mutate

sys.exit(mutate.main())
