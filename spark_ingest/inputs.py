"""Which files a run reads: every `--landing` (repeatable) is a directory, a file or a glob,
as a local path or any URI Spark's Hadoop file systems read (`file:///…`, `hdfs://nn/…`,
`s3a://…`), passed through as given, never resolved with pathlib.

A directory contributes its published landing files (`landing-*.jsonl`,
`landing-*.parquet`); hidden entries (`.landing-….tmp` being written, `_SUCCESS`) are
skipped quietly; every other entry, and a named file that is not a landing file, is
*unmatched*: counted and named in the summary, so a wrong folder never reads as an empty
one. A `--landing` that names nothing at all is *missing*; when every one is missing the
run fails (FileNotFoundError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from spark_ingest.hfs import HFS

LANDING_NAME = re.compile(r"^landing-.*\.(jsonl|parquet)$")


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class Inputs:
    """The resolved `--landing` values."""

    landings: list[str]
    #: qualified path -> bytes, of every landing file to read (sorted by path)
    files: dict[str, int] = field(default_factory=dict)
    #: qualified paths that are not landing files
    unmatched: list[str] = field(default_factory=list)
    #: --landing values that name nothing
    missing: list[str] = field(default_factory=list)

    @property
    def jsonl(self) -> list[str]:
        return [p for p in self.files if p.endswith(".jsonl")]

    @property
    def parquet(self) -> list[str]:
        return [p for p in self.files if p.endswith(".parquet")]

    def sizes_by_name(self) -> dict[str, int]:
        return {_name(p): b for p, b in self.files.items()}


def resolve(hfs: HFS, landings: list[str]) -> Inputs:
    """Every landing file the `landings` name (see the module docstring)."""
    out = Inputs(landings=list(landings))
    files: dict[str, int] = {}
    unmatched: set[str] = set()
    for landing in landings:
        found = hfs.glob(landing)
        if not found:
            out.missing.append(landing)
            continue
        for path, is_dir, size in found:
            if is_dir:
                for p, d, b in hfs.entries(path):
                    name = _name(p)
                    if name.startswith((".", "_")):
                        continue
                    if not d and LANDING_NAME.match(name):
                        files[p] = b
                    else:
                        unmatched.add(p)
            elif LANDING_NAME.match(_name(path)):
                files[path] = size
            else:
                unmatched.add(path)
    out.files = dict(sorted(files.items()))
    out.unmatched = sorted(unmatched)
    if out.missing and len(out.missing) == len(landings):
        what = ", ".join(out.missing)
        raise FileNotFoundError(f"landing directory {what} does not exist (nothing matches)")
    return out
