"""Synthetic landing zone (design.md "Landing zone") for tests, benchmarks and demos.

Writes files exactly as the gateway does: `landing-<UTC yyyymmddTHHMMSS>-<seq>.jsonl`, first as
a hidden `.landing-....jsonl.tmp`, then renamed, so a streaming reader never sees half a file.
The Parquet variant (see docs/spark_ingest.md "Parquet landing") is written the same way with
the suffix `.parquet`.

Lines are formatted from a template rather than with `json.dumps` per row: 2 million rows take
a few seconds, not a minute. Everything is a pure function of the arguments (no randomness), so
a test can recompute what it expects.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

DEVICE_NS = "urn:wsn-edge:devices"
READING_NS = "urn:wsn-edge:reading"
READING_TYPE = "{urn:wsn-edge:reading}Reading"

# (topic, unit, base value, amplitude): one topic per sensor kind (design.md names)
TOPICS: tuple[tuple[str, str, float, float], ...] = (
    ("temperature", "Cel", 20.0, 5.0),
    ("humidity", "%RH", 50.0, 20.0),
    ("light", "lx", 300.0, 250.0),
)


@dataclass(frozen=True)
class Message:
    """One accepted notification as the gateway lands it (design.md table)."""

    id: str
    received_at: datetime
    producer: str | None
    topic_path: str | None
    fields: dict[str, str] = field(default_factory=dict)
    topic_namespace: str | None = DEVICE_NS
    message_type: str | None = READING_TYPE
    payload: str = ""
    device_id: str | None = None
    gateway_id: str | None = None
    event_time: datetime | None = None
    #: False: a line as written before issue 15 (no device_id, gateway_id, event_time keys)
    identity: bool = True

    def to_json(self) -> str:
        obj: dict[str, Any] = {
            "id": self.id,
            "received_at": iso_z(self.received_at),
        }
        if self.identity:
            obj["event_time"] = iso_z(self.event_time) if self.event_time else None
            obj["device_id"] = self.device_id
            obj["gateway_id"] = self.gateway_id
        obj |= {
            "producer": self.producer,
            "topic_namespace": self.topic_namespace,
            "topic_path": self.topic_path,
            "message_type": self.message_type,
            "fields": self.fields,
            "payload": self.payload or reading_xml(self.fields),
        }
        return json.dumps(obj, separators=(",", ":"))


def iso_z(t: datetime) -> str:
    """`2026-11-21T05:00:00.123456Z` (design.md: UTC, microseconds, `Z`)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def reading_xml(fields: dict[str, str]) -> str:
    dev = fields.get("device", "")
    inner = "".join(f"<rd:{k}>{v}</rd:{k}>" for k, v in fields.items() if k != "device")
    return f'<rd:Reading xmlns:rd="{READING_NS}" device="{dev}">{inner}</rd:Reading>'


GATEWAY_ID = "gw-synth"


def producer_of(device: str) -> str:
    # loopback addresses only, as everywhere in this project's tests
    n = int(device.rsplit("-", 1)[-1]) if device[-1:].isdigit() else 0
    return f"http://127.0.0.1:{9000 + n}/wsn/producer"


def readings(
    n: int,
    *,
    devices: Sequence[str] = ("esp32-01", "esp32-02"),
    start: datetime = datetime(2026, 11, 21, 5, 0, tzinfo=UTC),
    step: timedelta = timedelta(seconds=10),
    topics: Sequence[tuple[str, str, float, float]] = TOPICS,
) -> Iterator[Message]:
    """`n` readings: every device publishes every topic once per `step`, in time order."""
    i = 0
    tick = 0
    while i < n:
        for d, dev in enumerate(devices):
            for t, (topic, unit, base, amp) in enumerate(topics):
                if i >= n:
                    return
                at = start + tick * step + timedelta(milliseconds=10 * (d * len(topics) + t))
                value = _value(base, amp, tick * step.total_seconds(), d, tick)
                yield Message(
                    id=f"{i:032x}",
                    received_at=at,
                    producer=producer_of(dev),
                    device_id=dev,
                    gateway_id=GATEWAY_ID,
                    event_time=at.replace(microsecond=0),
                    topic_path=f"{dev}/{topic}",
                    fields={
                        "device": dev,
                        "value": f"{value:.2f}",
                        "unit": unit,
                        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    },
                )
                i += 1
        tick += 1


def _value(base: float, amp: float, seconds: float, device: int, tick: int) -> float:
    """A smooth hourly wave per device (phase by device) with a small deterministic wobble:
    plots of synthetic data look like sensors, not noise."""
    wave = math.sin(2 * math.pi * (seconds / 3600.0 + device / 7.0))
    wobble = (((tick * 7 + device * 3) % 11) - 5) / 50.0
    return base + amp * (0.8 * wave + wobble)


def landing_name(stamp: datetime, seq: int, suffix: str = ".jsonl") -> str:
    return f"landing-{stamp.astimezone(UTC):%Y%m%dT%H%M%S}-{seq:06d}{suffix}"


def publish(directory: Path, name: str, data: bytes) -> Path:
    """Write `data` as `directory/name` the way the gateway does: hidden temp, fsync, rename."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    final = directory / name
    os.replace(tmp, final)
    return final


def write_lines(directory: Path, name: str, lines: Iterable[str]) -> Path:
    return publish(directory, name, "".join(line + "\n" for line in lines).encode())


# ---- fast generator (benchmarks, demos) -------------------------------------------------

# what the gateway writes since issue 15 (landing_record.py): identity keys, and a payload
# with only its own namespace declaration
_TEMPLATE = (
    '{"id":"%032x","received_at":"%s.%06dZ","event_time":"%s.000000Z","producer":"%s",'
    '"device_id":"%s","gateway_id":"'
    + GATEWAY_ID
    + '","topic_namespace":"'
    + DEVICE_NS
    + '","topic_path":"%s/%s","message_type":"'
    + READING_TYPE
    + '","fields":{"device":"%s","value":"%.2f","unit":"%s","time":"%sZ"},'
    + '"payload":"<rd:Reading xmlns:rd=\\"'
    + READING_NS
    + '\\" device=\\"%s\\"><rd:value>%.2f</rd:value><rd:unit>%s</rd:unit>'
    + '<rd:time>%sZ</rd:time></rd:Reading>"}\n'
)


def write_synthetic(
    directory: Path,
    rows: int,
    *,
    files: int = 4,
    devices: int = 50,
    start: datetime = datetime(2026, 11, 21, 0, 0, tzinfo=UTC),
    step_s: float = 10.0,
    fmt: str = "jsonl",
) -> list[Path]:
    """`rows` landing lines in `files` files (JSON lines or the Parquet variant).

    Device k publishes the three TOPICS every `step_s` seconds, staggered by a few ms. Used by
    tests/bench/ingest_bench.py (2 million rows in seconds) and `wsn-ingest synth`.
    """
    devs = [f"dev-{k:03d}" for k in range(devices)]
    prods = [producer_of(d) for d in devs]
    per_tick = devices * len(TOPICS)
    t0 = int(start.timestamp() * 1_000_000)
    step_us = int(step_s * 1_000_000)
    per_file = -(-rows // files)
    out: list[Path] = []
    sec_cache: dict[int, str] = {}

    def sec(s: int) -> str:
        v = sec_cache.get(s)
        if v is None:
            v = datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%S")
            if len(sec_cache) > 100_000:
                sec_cache.clear()
            sec_cache[s] = v
        return v

    for f in range(files):
        lo, hi = f * per_file, min(rows, (f + 1) * per_file)
        if lo >= hi:
            break
        cols: dict[str, list[Any]] = {
            k: [] for k in ("id", "at", "prod", "tp", "fields", "pl", "ev", "dev", "gw")
        }
        parts: list[str] = []
        for i in range(lo, hi):
            tick, r = divmod(i, per_tick)
            d, t = divmod(r, len(TOPICS))
            topic, unit, base, amp = TOPICS[t]
            us = t0 + tick * step_us + 1000 * (d * len(TOPICS) + t)
            s, frac = divmod(us, 1_000_000)
            value = _value(base, amp, tick * step_s, d, tick)
            hhmmss = sec(s)
            dev = devs[d]
            if fmt == "jsonl":
                parts.append(
                    _TEMPLATE
                    % (
                        i,
                        hhmmss,
                        frac,
                        hhmmss,
                        prods[d],
                        dev,
                        dev,
                        topic,
                        dev,
                        value,
                        unit,
                        hhmmss,
                        dev,
                        value,
                        unit,
                        hhmmss,
                    )
                )
            else:
                cols["id"].append(f"{i:032x}")
                cols["at"].append(us)
                cols["prod"].append(prods[d])
                cols["tp"].append(f"{dev}/{topic}")
                cols["ev"].append(s * 1_000_000)
                cols["dev"].append(dev)
                cols["gw"].append(GATEWAY_ID)
                v = f"{value:.2f}"
                cols["fields"].append(
                    [("device", dev), ("value", v), ("unit", unit), ("time", hhmmss + "Z")]
                )
                cols["pl"].append(
                    f'<rd:Reading xmlns:rd="{READING_NS}" device="{dev}"><rd:value>{v}'
                    f"</rd:value><rd:unit>{unit}</rd:unit><rd:time>{hhmmss}Z</rd:time>"
                    "</rd:Reading>"
                )
        stamp = start + timedelta(seconds=f)
        if fmt == "jsonl":
            out.append(publish(directory, landing_name(stamp, f + 1), "".join(parts).encode()))
        else:
            out.append(_write_parquet(directory, landing_name(stamp, f + 1, ".parquet"), cols))
    return out


def _map_array(rows: list[list[tuple[str, str]]]) -> Any:
    """map<string,string> from lists of pairs, via offsets (10x faster than pa.array)."""
    import pyarrow as pa

    offsets = [0]
    keys: list[str] = []
    values: list[str] = []
    for row in rows:
        for k, v in row:
            keys.append(k)
            values.append(v)
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string())
    )


def _write_parquet(directory: Path, name: str, cols: dict[str, list[Any]]) -> Path:
    """Write the columns as a Parquet landing file (schema.parquet_landing_arrow)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_ingest.schema import parquet_landing_arrow

    n = len(cols["id"])
    table = pa.table(
        {
            "id": pa.array(cols["id"], pa.string()),
            "received_at": pa.array(cols["at"], pa.timestamp("us", tz="UTC")),
            "producer": pa.array(cols["prod"], pa.string()),
            "topic_namespace": pa.array(cols.get("ns", [DEVICE_NS] * n), pa.string()),
            "topic_path": pa.array(cols["tp"], pa.string()),
            "message_type": pa.array([READING_TYPE] * n, pa.string()),
            "fields": _map_array(cols["fields"]),
            "payload": pa.array(cols["pl"], pa.string()),
            "event_time": pa.array(cols.get("ev", [None] * n), pa.timestamp("us", tz="UTC")),
            "device_id": pa.array(cols.get("dev", [None] * n), pa.string()),
            "gateway_id": pa.array(cols.get("gw", [None] * n), pa.string()),
            "fields_truncated": pa.array([False] * n, pa.bool_()),
            "payload_omitted": pa.array([0] * n, pa.int64()),
        },
        schema=parquet_landing_arrow(),
    )
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    pq.write_table(table, tmp)
    final = directory / name
    os.replace(tmp, final)
    return final


def write_parquet_messages(directory: Path, name: str, messages: Iterable[Message]) -> Path:
    """`messages` as one file of the Parquet landing variant (hidden temp, then rename)."""
    cols: dict[str, list[Any]] = {
        k: [] for k in ("id", "at", "prod", "tp", "fields", "pl", "ev", "dev", "gw", "ns")
    }
    for m in messages:
        cols["id"].append(m.id)
        cols["at"].append(int(m.received_at.timestamp() * 1_000_000))
        cols["prod"].append(m.producer)
        cols["tp"].append(m.topic_path)
        cols["fields"].append(list(m.fields.items()))
        cols["pl"].append(m.payload or reading_xml(m.fields))
        cols["ev"].append(int(m.event_time.timestamp() * 1_000_000) if m.event_time else None)
        cols["dev"].append(m.device_id)
        cols["gw"].append(m.gateway_id)
        cols["ns"].append(m.topic_namespace)
    return _write_parquet(directory, name, cols)
