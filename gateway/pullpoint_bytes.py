"""The bytes pull points hold, as a quota per client address and in all (issue 22 point 3:
--max-client-pullpoint-bytes, --max-pullpoint-bytes; gateway.quotas PULLPOINT_BYTES).

What happens at the bound follows the spec and the bound per pull point: WS-BaseNotification
1.3 §5.1.1 accumulates "on a best effort basis": a PullPoint no longer capable of
accumulating "MAY ignore Notification Messages ... or it MAY dispose of any previously
accumulated Notification Messages and continue to accumulate incoming" ones. The publisher
of a Notify is not the pull point's client: refusing its Notify would punish it and every
other subscriber for what a pull point's client keeps unread. So, as --pullpoint-max-bytes
and --pullpoint-max-messages already do, the pull point being added to drops its OLDEST
messages until its client's and the total bytes are within their bounds again, the newest
message always kept (a client that comes back gets the newest data). Each
such Notify is one refusal of the quota for the pull point's client (counted in
wsn_quota_refusals_total{quota="pull-point bytes"}, logged once per client per interval by
gateway.quotas). A pull point always keeps its newest message, so the bound may be passed
by at most one message per pull point.

A caller may rely on:

* `bound(ctx, batch)` sets, before the commit, the bytes each pull point `batch` adds to
  may hold (`AcceptBatch.pp_bytes_limits`), from the account as it is then (a Notify
  committed in the same group is not yet in it: the bound is checked per Notify);
* `account(ctx, result)` follows, after the commit, what each pull point's messages grew by
  (storage's exact count: the UTF-8 length of each stored text, what --pullpoint-max-bytes
  counts), and `taken(ctx, pp_id, msgs)` what GetMessages removed; a pull point's bytes are
  held from its CreatePullPoint (0) and given back when it ends (gateway.followers).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway import quotas
from gateway.context import Context
from gateway.storage import AcceptBatch, AcceptResult, Pending


def bound(ctx: Context, batch: AcceptBatch) -> None:
    """Set `batch`'s bytes bounds: --pullpoint-max-bytes, and lower for the pull points whose
    client (or all pull points) would pass its quota (module docstring)."""
    batch.pp_max_bytes = ctx.cfg.pullpoint_max_bytes
    if not batch.pp_messages:
        return
    q = ctx.quotas
    added: dict[str, int] = {}
    sizes = batch.pp_sizes  # measured once: storage counts the same (storage_accept)
    for pp, _sub, i in batch.pp_messages:
        n = sizes.get(i)
        if n is None:
            n = sizes[i] = len(batch.renderings[i][1].encode())
        added[pp] = added.get(pp, 0) + n
    for pp, n in added.items():
        client = q.client_of(quotas.PULLPOINT_BYTES, pp)
        if client is None:  # ended meanwhile: its rows are deleted with it
            continue
        room = q.room(quotas.PULLPOINT_BYTES, client)
        if room is None or n <= room:
            continue
        q.refuse(quotas.PULLPOINT_BYTES, client, n)  # counted and logged
        # what this pull point may hold: what it holds and the room left (1: its newest)
        batch.pp_bytes_limits[pp] = max(1, q.amount(quotas.PULLPOINT_BYTES, pp) + room)


def account(ctx: Context, result: AcceptResult) -> None:
    """Follow what the pull points' messages grew by in a commit."""
    for pp, delta in result.pp_bytes.items():
        ctx.quotas.adjust(quotas.PULLPOINT_BYTES, pp, delta)


def taken(ctx: Context, pp_id: str, msgs: Sequence[Pending]) -> None:
    """Follow what GetMessages removed from `pp_id`."""
    if msgs:
        gone = sum(len(m.xml.encode()) for m in msgs)
        ctx.quotas.adjust(quotas.PULLPOINT_BYTES, pp_id, -gone)
