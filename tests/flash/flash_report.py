"""Board summaries of `flash.sh qemu` runs, printed by conftest.py's terminal summary hook."""

flash_summaries: list[str] = []
