"""Command-line checks that need no Spark: bad durations are usage errors (exit 2) before a
JVM starts; the duration parser accepts what withWatermark/window accept."""

from __future__ import annotations

import pytest

from spark_ingest import cli
from spark_ingest.options import interval_us


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("1 minute", 60_000_000),
        ("10 seconds", 10_000_000),
        ("5 minutes", 300_000_000),
        ("1 hour 30 minutes", 5_400_000_000),
        ("interval 2 days", 172_800_000_000),
        ("500 milliseconds", 500_000),
    ],
)
def test_interval_us(text: str, us: int) -> None:
    assert interval_us(text) == us


@pytest.mark.parametrize("bad", ["", "abc", "5", "1 month", "10 seconds x"])
def test_interval_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        interval_us(bad)


def test_a_zero_duration_only_where_it_means_something() -> None:
    assert interval_us("0 seconds", zero_ok=True) == 0
    with pytest.raises(ValueError, match="not a duration"):
        interval_us("0 seconds")


@pytest.mark.parametrize(
    ("argv", "opt"),
    [
        (["stream", "--trigger", "banana"], "--trigger"),
        (["stream", "--watermark", "soon"], "--watermark"),
        (["batch", "--window", "1 fortnight"], "--window"),
        (["batch", "--burst", "soon"], "--burst"),
        (["stream", "--state-horizon", "a while"], "--state-horizon"),
    ],
)
def test_bad_durations_are_usage_errors(
    argv: list[str], opt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--landing", "l", "--out", "o"]
    with pytest.raises(SystemExit) as e:
        cli.main([argv[0], *base, *argv[1:]])
    assert e.value.code == 2
    assert f"{opt}: not a duration" in capsys.readouterr().err


def test_console_progress_bars_off_unless_the_user_asks() -> None:
    from spark_ingest.session import session_conf

    assert session_conf()["spark.ui.showConsoleProgress"] == "false"
    assert session_conf()["spark.sql.session.timeZone"] == "UTC"
    assert session_conf()["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    mine = session_conf({"spark.ui.showConsoleProgress": "true"})
    assert mine["spark.ui.showConsoleProgress"] == "true"
