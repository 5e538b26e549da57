"""Parquet variant of the landing zone (docs/spark_ingest.md "Parquet landing"), selected
with --landing-format parquet|both. Same records as the JSON lines (landing.record), as the
columns id, received_at (timestamp[us, UTC]), producer, topic_namespace, topic_path,
message_type, fields (map<string, string>), payload, then (issue 15; files written before
lack them, and a reader gets nulls) event_time (timestamp[us, UTC]), device_id, gateway_id,
fields_truncated (bool) and payload_omitted (int64, 0 when the payload is whole).

A Parquet file is readable only once its footer is written, so it cannot grow line by line
like the JSON-lines file. Records wait in their own SQLite outbox (landing_outbox_parquet,
filled in the transaction that accepts the Notify) until the file is due (its records reach
--landing-max-bytes as JSON, the oldest waited --landing-max-age, or shutdown). Then:

1. write `.landing-<UTC>-<seq>.parquet.tmp` (row groups of up to 5000 records), close it
   (footer), fsync;
2. one transaction: delete those records from the outbox and record the temporary name as
   complete (landing_parquet_files);
3. rename to `landing-<UTC yyyymmddTHHMMSS>-<seq>.parquet`, fsync the directory;
4. forget the name.

Exactly once: a crash before 2 leaves a temporary file nobody recorded (recover() deletes
it; its records are still in the outbox and are written again); a crash between 2 and 3
leaves a recorded temporary file (recover() publishes it); after 3 only the record of the
name is left (recover() forgets it).

pyarrow is imported only when this writer is created (the `spark` extra); the gateway runs
without it when the option is not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.landing_files import OutboxWriter, wait_for_room
from gateway.storage import Storage

ROW_GROUP = 5000


def import_pyarrow() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or a RuntimeError saying how to install them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise RuntimeError(
            "--landing-format parquet|both needs pyarrow, which is not installed "
            f"({e}); install the spark extra (pip install 'wsn-edge[spark]') or pyarrow, "
            "or use --landing-format jsonl"
        ) from None
    return pa, pq


def arrow_schema(pa: Any) -> Any:
    """The column contract of docs/spark_ingest.md (spark_ingest.schema.parquet_landing_arrow)."""
    return pa.schema(
        [
            ("id", pa.string()),
            ("received_at", pa.timestamp("us", tz="UTC")),
            ("producer", pa.string()),
            ("topic_namespace", pa.string()),
            ("topic_path", pa.string()),
            ("message_type", pa.string()),
            ("fields", pa.map_(pa.string(), pa.string())),
            ("payload", pa.string()),
            ("event_time", pa.timestamp("us", tz="UTC")),
            ("device_id", pa.string()),
            ("gateway_id", pa.string()),
            ("fields_truncated", pa.bool_()),
            ("payload_omitted", pa.int64()),
        ]
    )


_STRINGS = (
    "producer",
    "topic_namespace",
    "topic_path",
    "message_type",
    "payload",
    "device_id",
    "gateway_id",
)


def _utc(text: str | None) -> datetime | None:
    if text is None:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def _columns(lines: list[str]) -> dict[str, list[Any]]:
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "id",
            "received_at",
            "fields",
            "event_time",
            "fields_truncated",
            "payload_omitted",
            *_STRINGS,
        )
    }
    for line in lines:
        r = json.loads(line)
        cols["id"].append(r["id"])
        cols["received_at"].append(_utc(r["received_at"]))
        cols["event_time"].append(_utc(r.get("event_time")))
        for k in _STRINGS:
            cols[k].append(r.get(k))
        cols["fields"].append(list(r["fields"].items()))
        cols["fields_truncated"].append(bool(r.get("fields_truncated", False)))
        cols["payload_omitted"].append(int(r.get("payload_omitted", 0)))
    return cols


class ParquetLandingWriter(OutboxWriter):
    """Parquet landing files (see the module docstring); the shared run loop, stop protocol
    and file names are landing_files.OutboxWriter's."""

    suffix = ".parquet"
    what = "Parquet landing file"

    def __init__(
        self,
        directory: Path,
        storage: Storage,
        max_bytes: int = 64 * 1024 * 1024,
        max_age: float = 60.0,
    ) -> None:
        self.pa, self.pq = import_pyarrow()
        self.schema = arrow_schema(self.pa)
        super().__init__(directory, storage, max_bytes, max_age)
        self._pending_bytes = 0
        self._oldest_at: float | None = None  # monotonic time the oldest waiting record came
        self.records_written = 0
        self.files_written = 0

    # ---- start / stop ----
    def recover(self) -> None:
        """Finish or discard what a crash left behind (see the module docstring); on a
        full disk, once there is room (landing_files.wait_for_room)."""
        wait_for_room(self._recover, self.dir, self.what)

    def _recover(self) -> None:
        self._scan_seq()
        recorded = set(self.storage.parquet_files_sync())
        for p in sorted(self.dir.glob(".landing-*.parquet.tmp")):
            if p.name in recorded:
                os.replace(p, self.dir / p.name[1:].removesuffix(".tmp"))
            else:
                p.unlink()
        self._fsync_dir()
        for name in recorded:
            self.storage.parquet_file_published_sync(name)

    async def start(self) -> None:
        n, nbytes, _ = await self.storage.parquet_outbox_stats()
        self._pending_bytes = nbytes
        self._oldest_at = time.monotonic() if n else None
        self._start_task("landing-parquet-writer")

    async def _final(self) -> None:
        """What is left in the outbox, as one last file."""
        await self.publish()

    def kick(self, nbytes: int) -> None:
        """`nbytes` of JSON records were committed to the outbox."""
        self._pending_bytes += nbytes
        if self._oldest_at is None:
            self._oldest_at = time.monotonic()
        if self._pending_bytes >= self.max_bytes:
            self._wake.set()

    # ---- writing ----
    def _due(self) -> bool:
        if self._oldest_at is None:
            return False
        return (
            self._pending_bytes >= self.max_bytes
            or time.monotonic() - self._oldest_at >= self.max_age
        )

    async def _work(self) -> None:
        await self.publish()

    async def publish(self) -> None:
        """Write every record now in the outbox as one published file (none if empty)."""
        async with self._lock:
            n, _, up_to = await self.storage.parquet_outbox_stats()
            if n:
                await self._publish(up_to)
            n, nbytes, _ = await self.storage.parquet_outbox_stats()
            self._pending_bytes = nbytes
            self._oldest_at = time.monotonic() if n else None

    async def _publish(self, up_to: int) -> None:
        loop = asyncio.get_running_loop()
        tmp, final = self._new_name()
        writer = None
        count = 0
        try:
            writer = await loop.run_in_executor(None, self._open, tmp)
            after = 0
            while True:
                rows = await self.storage.parquet_pending(after, up_to, ROW_GROUP)
                if not rows:
                    break
                after = rows[-1][0]
                await loop.run_in_executor(None, self._write, writer, [r[2] for r in rows])
                count += len(rows)
            await loop.run_in_executor(None, self._close, writer, tmp)
        except BaseException:
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
            tmp.unlink(missing_ok=True)
            raise
        try:
            await self.storage.parquet_file_written(tmp.name, up_to)
        except BaseException:
            tmp.unlink(missing_ok=True)  # not recorded: its rows are still in the outbox
            raise
        os.replace(tmp, final)
        self._fsync_dir()
        await self.storage.parquet_file_published(tmp.name)
        self.records_written += count
        self.files_written += 1

    def _open(self, tmp: Path) -> Any:
        return self.pq.ParquetWriter(str(tmp), self.schema)

    def _write(self, writer: Any, lines: list[str]) -> None:
        writer.write_table(self.pa.table(_columns(lines), schema=self.schema))

    def _close(self, writer: Any, tmp: Path) -> None:
        writer.close()  # writes the footer
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
