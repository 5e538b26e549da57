"""`wsn` / `python -m wsncli` entry point."""

from __future__ import annotations

import sys

from wsncli.cli import main

if __name__ == "__main__":
    sys.exit(main())
