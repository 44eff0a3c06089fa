"""Entry point of `python -m compare`."""

import sys

from compare import cli

if __name__ == "__main__":
  sys.exit(cli.main())
