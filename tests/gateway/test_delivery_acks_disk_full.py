"""Deleting delivered rows on a full disk (found by tests/bench/soak_bench.py): on a1410b0
each failed deletion was an ERROR with a traceback and the rows stayed, to be sent again
after the next restart. Now it is one WARNING, the rows are deleted once the storage takes
writes again, and one WARNING says so."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from gateway.delivery_acks import RowDeletions
from gateway.storage import AcceptBatch, Storage, StorageError


async def test_deletions_wait_out_a_full_disk(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = Storage(tmp_path / "db.sqlite3")
    st.open()
    try:
        batch = AcceptBatch(renderings=[(0, "<x/>")], deliveries=[("s1", 0), ("s1", 0)])
        res = await st.accept(batch)
        seqs = list(res.delivery_seqs)
        real = st.delete_deliveries
        failures = 3

        async def full(s: list[int]) -> None:
            nonlocal failures
            if failures:
                failures -= 1
                raise StorageError("storage failure: database or disk is full")
            await real(s)

        monkeypatch.setattr(st, "delete_deliveries", full)
        rows = RowDeletions(st)
        with caplog.at_level(logging.WARNING, logger="gateway.delivery"):
            rows.ack(seqs[:1])
            rows.forget(seqs[1:])
            for _ in range(100):
                await asyncio.sleep(0.1)
                if not failures and rows._ack_task is not None and rows._ack_task.done():
                    break
            await rows.close()
        assert st.load().deliveries == []
        texts = [r.getMessage() for r in caplog.records]
        assert all(r.exc_info is None for r in caplog.records), texts
        assert sum("could not delete delivered or dropped outbox rows" in t for t in texts) == 1
        assert sum("outbox rows are deleted again" in t for t in texts) == 1
    finally:
        st.close()
