"""What the broker's WS-Resources (subscriptions, pull points, publisher registrations)
share: their ids, their URL pattern (docs/design.md "Gateway URL space") and the epoch
seconds their times are stored as."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

#: /wsn/<kind>/<id> of a resource
RES_PATH = re.compile(r"^/wsn/(subscriptions|pullpoints|registrations)/([0-9A-Za-z_-]+)$")


def new_id() -> str:
    """A resource id (subscription, pull point, registration): random, unguessable."""
    return uuid.uuid4().hex


def epoch(dt: datetime | None) -> float | None:
    return dt.timestamp() if dt is not None else None


def from_epoch(x: float | None) -> datetime | None:
    return datetime.fromtimestamp(x, UTC) if x is not None else None
