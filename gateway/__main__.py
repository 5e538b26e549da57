"""`wsn-gateway` / `python -m gateway` entry point."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the broker (replaced by the full CLI in gateway.cli)."""
    from gateway.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
