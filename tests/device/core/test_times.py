# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from wsn.core import xml as T
from wsn.core.soap import format_datetime

UNIX_2000 = 946684800


def _bad(fn, s):
    try:
        fn(s)
    except T.TimeError:
        return
    raise AssertionError("accepted %r" % s)


def test_epoch_and_known_dates():
    assert format_datetime(0) == "2000-01-01T00:00:00Z"
    assert T.parse_datetime("2000-01-01T00:00:00Z") == 0
    t = T.parse_datetime("2026-11-21T05:00:00Z")
    assert t == 1795237200 - UNIX_2000
    assert format_datetime(t) == "2026-11-21T05:00:00Z"
    assert format_datetime(-1) == "1999-12-31T23:59:59Z"
    assert (
        T.parse_datetime("2024-02-29T12:00:00Z") - T.parse_datetime("2024-02-28T12:00:00Z") == 86400
    )
    assert format_datetime(T.parse_datetime("2100-03-01T00:00:00Z")) == "2100-03-01T00:00:00Z"


def test_roundtrip_many_days():
    for d in range(-800, 20000, 37):
        t = d * 86400 + 3723
        assert T.parse_datetime(format_datetime(t)) == t


def test_zones_and_fractions():
    base = T.parse_datetime("2026-01-01T10:00:00Z")
    assert T.parse_datetime("2026-01-01T10:00:00") == base
    assert T.parse_datetime("2026-01-01T12:00:00+02:00") == base
    assert T.parse_datetime("2026-01-01T09:30:00-00:30") == base
    assert T.parse_datetime("2026-01-01T10:00:00.999Z") == base
    assert T.parse_datetime(" 2026-01-01T10:00:00.5+00:00 ") == base


def test_bad_datetimes():
    for s in (
        "",
        "2026-01-01",
        "2026-13-01T00:00:00Z",
        "2026-01-01T00:00:00Q",
        "x026-01-01T00:00:00Z",
        "2026-01-01T00:00:00.Z",
        "2026-01-01 00:00:00Z",
    ):
        _bad(T.parse_datetime, s)


def test_durations():
    assert T.parse_duration("PT1S") == 1
    assert T.parse_duration("PT1M") == 60
    assert T.parse_duration("PT1H30M") == 5400
    assert T.parse_duration("P1D") == 86400
    assert T.parse_duration("P1DT1S") == 86401
    assert T.parse_duration("P1Y") == 365 * 86400
    assert T.parse_duration("P1M") == 30 * 86400
    assert T.parse_duration("PT0.2S") == 1
    assert T.parse_duration("PT2.0S") == 2
    assert T.parse_duration("-PT5S") == -5
    for s in ("", "P", "PT", "1D", "PT1D", "P1H", "P1.5D", "PTS", "P1DT", "PT1X", "P-1D"):
        _bad(T.parse_duration, s)


def test_parse_time_either_form():
    assert T.parse_time("PT10S", 1000) == 1010
    assert T.parse_time("2000-01-01T00:16:40Z", 5) == 1000
