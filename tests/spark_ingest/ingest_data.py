"""Hand-made landing zones for the ingest tests, and what the job must make of them,
recomputed here in plain Python (the oracle the Spark output is compared with)."""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from spark_ingest.synth import Message, landing_name, producer_of, write_lines

T0 = datetime(2026, 11, 21, 5, 0, tzinfo=UTC)
RESERVED = ("device", "unit", "time")  # aggregate.RESERVED_FIELDS: not measurements
# what Spark's default log profile, PySpark and Hadoop print when a JVM starts, in their
# words: none of it reaches a user of wsn-ingest (session.LOG4J2_FILE)
START_UP_LINES = (
    "Using Spark's default log4j profile",
    "Setting default log level to",
    "setLogLevel(newLevel)",
    "Unable to load native-hadoop library",
)
# a warning or an error as the JVM logs it (spark_ingest/log4j2.properties: date, time,
# level, logger), and a frame of a Java stack trace under it
JVM_COMPLAINT = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:WARN|ERROR) .*$|^\tat .*$", re.M)
_dbs = 0


def new_database() -> str:
    """A catalog database no other test uses (one --out, one database)."""
    global _dbs
    _dbs += 1
    return f"t{os.getpid()}_{_dbs}"


P1, P2, P3 = producer_of("esp32-01"), producer_of("esp32-02"), producer_of("pico-03")

_n = 0


def msg(
    sec: float,
    producer: str | None,
    topic: str | None,
    fields: dict[str, str],
    msg_id: str | None = None,
) -> Message:
    global _n
    _n += 1
    return Message(
        id=msg_id or f"m{_n:05d}",
        received_at=T0 + timedelta(seconds=sec),
        producer=producer,
        topic_path=topic,
        fields=fields,
    )


def reading(sec: float, producer: str, topic: str, value: str, **extra: str) -> Message:
    dev = topic.split("/")[0]
    unit = {"temperature": "Cel", "humidity": "%RH"}.get(topic.split("/")[-1], "1")
    at = T0 + timedelta(seconds=sec)
    fields = {
        "device": dev,
        "value": value,
        "unit": unit,
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        **extra,
    }
    return msg(sec, producer, topic, fields)


@dataclass
class Bad:
    raw: str
    reason: str


# ---- the batch landing zone: two files, bad lines, late data, a gap, a wrong clock -------


def batch_zone() -> tuple[list[list[Message | Bad]], list[Message], list[Bad]]:
    t = "esp32-01/temperature"
    h = "esp32-01/humidity"
    t2 = "esp32-02/temperature"
    hb = "pico-03/heartbeat"
    file1: list[Message | Bad] = [
        reading(5, P1, t, "20.5"),
        reading(25, P1, t, "21.0"),
        Bad("garbage", "malformed_json"),
        reading(45, P1, t, "19.5"),
        reading(65, P1, t, "22.0"),
        reading(90, P1, t, "23.25"),
        reading(10, P1, h, "55"),
        reading(40, P1, h, "n/a"),  # not a number: counted, kept as text, no min/max
        reading(70, P1, h, "NaN"),  # not a finite number either
        Bad('{"id":"q1","received_at":"2026-11-21T05:00:00Z"', "malformed_json"),
        # two readings at the same instant: `last` is the one with the greater id
        msg(7, P2, t2, {"value": "18"}, msg_id="z-a"),
        msg(7, P2, t2, {"value": "19"}, msg_id="z-b"),
        Bad("", "blank_line"),
        Bad("[1,2]", "malformed_json"),
        # a device with a wrong clock: its own `time` is 1970, received_at decides
        msg(70, P2, t2, {"value": "17.5", "time": "1970-01-01T00:00:00Z"}),
        # producer and topic may be null per the contract: aggregated under null keys
        msg(20, None, None, {"value": "5"}),
        # what counts as a number (aggregate.NUMBER_RE): decimal and scientific text, signs,
        # blanks around; not hex, digit separators, overflow or Infinity
        msg(
            50,
            P2,
            "esp32-02/numbers",
            {
                "sci": "1e3",
                "plus": "+5",
                "frac": ".5",
                "pad": " 7 ",
                "hex": "0x10",
                "under": "1_000",
                "huge": "1e999",
                "inf": "Infinity",
                "word": "five",
            },
        ),
        # a message without fields (heartbeat): a message for devices, no measurement
        msg(30, P3, hb, {}),
        Bad('{"id":"q2","received_at":"2026-11-21T05:00:00Z","producer":"x"}', "missing_fields"),
        Bad('{"received_at":"2026-11-21T05:00:00Z","fields":{"value":"1"}}', "missing_id"),
        Bad('{"id":"","received_at":"2026-11-21T05:00:00Z","fields":{"value":"1"}}', "missing_id"),
        Bad('{"id":"q3","fields":{"value":"1"}}', "missing_received_at"),
        Bad('{"id":"q4","received_at":"yesterday","fields":{"value":"1"}}', "bad_received_at"),
        Bad('{"id":"q5","received_at":"2026-11-21T05:00:00Z","fields":"hot"}', "malformed_json"),
    ]
    # heartbeat every 10 s, then 150 s of silence, then again: one gap
    file1 += [msg(s, P3, hb, {"seq": str(i)}) for i, s in enumerate((0, 10, 20, 40))]
    file2: list[Message | Bad] = [
        # late: older than everything file 1 ended with; batch puts it in its window
        reading(15, P1, t, "30.0"),
        msg(190, P3, hb, {"seq": "5"}),
        msg(200, P3, hb, {"seq": "6"}),
        reading(130, P1, t, "24.0"),
    ]
    files = [file1, file2]
    msgs = [m for f in files for m in f if isinstance(m, Message)]
    bads = [m for f in files for m in f if isinstance(m, Bad)]
    return files, msgs, bads


def write_zone(landing: Path, files: list[list[Message | Bad]], first_seq: int = 1) -> list[Path]:
    paths = []
    for k, lines in enumerate(files):
        name = landing_name(T0 + timedelta(minutes=k), first_seq + k)
        paths.append(
            write_lines(
                landing, name, [m.raw if isinstance(m, Bad) else m.to_json() for m in lines]
            )
        )
    return paths


# ---- the oracle -------------------------------------------------------------------------

# aggregate.NUMBER_RE, with ASCII classes as in Java's regex
NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$", re.ASCII)


def as_number(v: str | None) -> float | None:
    if v is None or not NUMBER.match(v):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


Key = tuple[datetime, Any, Any, str]


def expected_aggregates(msgs: list[Message], window_s: int = 60) -> dict[Key, dict[str, Any]]:
    groups: dict[Key, list[tuple[datetime, str, str, str | None]]] = defaultdict(list)
    for m in msgs:
        ts = m.received_at.timestamp()
        start = datetime.fromtimestamp(ts - ts % window_s, UTC)
        for f, v in m.fields.items():
            if f in RESERVED:
                continue
            unit = m.fields.get("unit")
            groups[(start, m.producer, m.topic_path, f)].append((m.received_at, m.id, v, unit))
    out: dict[Key, dict[str, Any]] = {}
    for key, rows in groups.items():
        nums = [x for x in (as_number(v) for _, _, v, _ in rows) if x is not None]
        last = max(rows, key=lambda r: (r[0], r[1]))
        out[key] = {
            "window_end": key[0] + timedelta(seconds=window_s),
            "count": len(rows),
            "numeric_count": len(nums),
            "sum": sum(nums) if nums else None,
            "min": min(nums) if nums else None,
            "max": max(nums) if nums else None,
            "mean": sum(nums) / len(nums) if nums else None,
            "last": as_number(last[2]),
            "last_str": last[2],
            "last_at": last[0],
            "unit": last[3] if key[3] == "value" else None,
            "date": key[0].date(),
            "hour": key[0].hour,
        }
    return out


def naive(t: datetime) -> datetime:
    """Spark hands timestamps back as naive local (here: UTC) datetimes."""
    return t.astimezone(UTC).replace(tzinfo=None)


def spark_aggregates(rows: list[Any]) -> dict[Key, dict[str, Any]]:
    got: dict[Key, dict[str, Any]] = {}
    for r in rows:
        d = r.asDict()
        key = (
            d.pop("window_start").replace(tzinfo=UTC),
            d.pop("producer"),
            d.pop("topic_path"),
            d.pop("field"),
        )
        assert key not in got, f"duplicate aggregate row {key}"
        d["window_end"] = d["window_end"].replace(tzinfo=UTC)
        d["last_at"] = d["last_at"].replace(tzinfo=UTC)
        for k in ("device_key", "device_id", "gateway_id", "site"):
            d.pop(k, None)
        got[key] = d
    return got


def assert_same_aggregates(got: dict[Key, dict[str, Any]], want: dict[Key, dict[str, Any]]) -> None:
    assert sorted(got, key=repr) == sorted(want, key=repr)
    for key, w in want.items():
        g = got[key]
        for col, wv in w.items():
            gv = g[col]
            if isinstance(wv, float):
                assert gv == wv or math.isclose(gv, wv, rel_tol=1e-12), (key, col, gv, wv)
            else:
                assert gv == wv, (key, col, gv, wv)


# ---- streaming landing zones ------------------------------------------------------------


def steady(
    t_from: float,
    t_to: float,
    step: float = 10.0,
    devices: tuple[str, ...] = ("esp32-01", "esp32-02"),
) -> list[Message]:
    """Every device publishes temperature every `step` seconds in [t_from, t_to)."""
    out = []
    s = t_from
    k = 0
    while s < t_to:
        for d, dev in enumerate(devices):
            v = f"{20 + ((k * 7 + d * 3) % 13) / 4:.2f}"
            out.append(reading(s + d * 0.25, producer_of(dev), f"{dev}/temperature", v))
        s += step
        k += 1
    return out


def closed(aggs: dict[Key, dict[str, Any]], watermark: datetime) -> dict[Key, dict[str, Any]]:
    """The windows a streaming run has written: those ending at or before the watermark."""
    return {k: v for k, v in aggs.items() if v["window_end"] <= watermark}


# -- incremental histories the Spark tests compare with a full run ------------------------
#: columns that name where a row was read or written (two --out of one zone differ there)
PLACE = ("site", "source_file", "closed_until", "last_file_at", "files")
#: the tables an incremental history and a full run must agree on
COMPARED = ("aggregates", "device_quality", "site_quality", "quarantine", "devices", "sites")


def table_rows(spark: Any, db: str, table: str) -> list[str]:
    """`table` of catalog database `db`, its PLACE columns left out, as sorted reprs."""
    from spark_ingest.schema import TABLES

    cols = [c for c in TABLES[table].columns if c not in PLACE]
    return sorted(map(repr, spark.table(f"{db}.{table}").select(*cols).collect()))


def incremental_history(spark: Any, zone: Path, out: Path, db: str) -> None:
    """Three deliveries into `zone`, each followed by an incremental run into `out`/`db`:
    readings and heartbeats, a torn line, a late reading in a file of its own, and a file
    uploaded again under another name (every line a duplicate)."""
    import shutil

    from spark_ingest.batch import run_batch

    hb = "pico-03/heartbeat"
    late = reading(130, "http://127.0.0.1:9001/wsn/producer", "esp32-01/temperature", "50.5")
    deliveries = [
        [[*steady(0, 240), *[msg(s, P3, hb, {"seq": str(s)}) for s in range(0, 240, 10)]]],
        [[*steady(240, 480), Bad("{torn", "malformed_json")], [late]],
        [[*steady(480, 720), *[msg(s, P3, hb, {"seq": str(s)}) for s in range(400, 720, 10)]]],
    ]
    seq = 1
    for k, delivery in enumerate(deliveries):
        write_zone(zone, delivery, first_seq=seq)
        seq += len(delivery)
        if k == 1:
            first = sorted(zone.glob("landing-*-000001.jsonl"))[0]
            shutil.copy(first, zone / "landing-20261121T090000-000099.jsonl")
        s = run_batch(spark, str(zone), str(out), database=db)
        assert s.files >= 1
    assert s.reread >= 1


def one_new_file(spark: Any, zone: Path, out: Path, db: str) -> None:
    """Two files run into `out`/`db`, then a third one landed (not run): its lines share a
    window with the second file's."""
    from spark_ingest.batch import run_batch

    write_zone(zone, [list(steady(0, 300)), list(steady(300, 620))])
    run_batch(spark, str(zone), str(out), database=db)
    write_zone(zone, [list(steady(620, 680))], first_seq=3)
