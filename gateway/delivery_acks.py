"""The durable outbox's rows that delivery is done with, deleted in the background
(gateway/delivery.py decides which; storage.Storage.delete_deliveries deletes them).

- Delivered (`ack`): the consumer answered 2xx. A worker does not wait for the deletion
  before its next request; what all endpoints acknowledged while one deletion commits goes
  in the next one (one statement, one transaction). A crash before that commit sends them
  again, as a crash between the answer and the deletion always could (at-least-once).
- Dropped (`forget`): the backlog bound dropped them, or their subscription ended while
  their Notify committed; their rows must not come back after a restart.
- `close`: a stopping gateway waits up to ACK_FLUSH_ON_STOP for the deletion of delivered
  rows (else they are sent again after a restart) and cancels the deletions still queued
  (redone after a restart).
- A deletion that fails for the storage (a full disk) is tried again RETRY_AFTER seconds
  later, with what came meanwhile; one WARNING when deletions start failing, one when they
  work again (a traceback only for what is not a storage error: a bug).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.storage import Storage, StorageError

log = logging.getLogger("gateway.delivery")

#: seconds a stopping gateway waits for the deletion of acknowledged rows (else: resent)
ACK_FLUSH_ON_STOP = 5.0
#: seconds before a failed deletion is tried again
RETRY_AFTER = 1.0


class RowDeletions:
    """Deletes outbox rows by seq in the background; see the module docstring."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._bg: set[asyncio.Future[None]] = set()
        # delivered seqs whose rows are not deleted yet, and the task deleting them
        self._acks: list[int] = []
        self._ack_task: asyncio.Future[None] | None = None
        self._failing_since: float | None = None  # monotonic, while deletions fail

    def forget(self, seqs: list[int]) -> None:
        """Delete dropped rows in the background (they must not come back on restart)."""
        fut = asyncio.ensure_future(self._delete_dropped(seqs))
        self._bg.add(fut)
        fut.add_done_callback(self._bg.discard)

    async def _delete_dropped(self, seqs: list[int]) -> None:
        while True:
            try:
                await self.storage.delete_deliveries(seqs)
            except StorageError as e:  # a full disk: again a little later
                self._failed(e)
                await asyncio.sleep(RETRY_AFTER)
                continue
            except Exception:  # logged, not left to "exception was never retrieved"
                log.exception(
                    "could not delete %d dropped delivery rows (sent after a restart)", len(seqs)
                )
                return
            self._worked()
            return

    def ack(self, seqs: list[int]) -> None:
        """Delete delivered rows in the background: what all endpoints acknowledged while
        one deletion commits goes in the next one (one statement, one transaction)."""
        self._acks.extend(seqs)
        if self._ack_task is None or self._ack_task.done():
            self._ack_task = asyncio.ensure_future(self._flush_acks())

    async def _flush_acks(self) -> None:
        while self._acks:
            seqs, self._acks = self._acks, []
            try:
                await self.storage.delete_deliveries(seqs)
            except StorageError as e:  # a full disk: kept, and again a little later
                self._acks[:0] = seqs
                self._failed(e)
                await asyncio.sleep(RETRY_AFTER)
                continue
            except Exception:  # at-least-once: a row left behind is sent again later
                log.exception("could not delete delivered rows")
                continue
            self._worked()

    def _failed(self, e: StorageError) -> None:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.warning(
                "could not delete delivered or dropped outbox rows: %s; trying again every "
                "%g s (until then a restart would send them again)",
                e, RETRY_AFTER,
            )  # fmt: skip

    def _worked(self) -> None:
        if self._failing_since is not None:
            log.warning(
                "outbox rows are deleted again (after %.0f s)",
                time.monotonic() - self._failing_since,
            )
            self._failing_since = None

    async def close(self) -> None:
        ack = self._ack_task
        if ack is not None and not ack.done():  # delivered rows: do not send them again
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(ack), ACK_FLUSH_ON_STOP)
            if not ack.done():  # still failing (a full disk): sent again after a restart
                ack.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ack
        for f in list(self._bg):  # row deletions still queued are redone after a restart
            f.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await f
