"""`received_at` (and `event_time`) text -> a UTC timestamp, with a reason when refused.

What is accepted (docs/spark_ingest.md, "Input"): every date-time RFC 3339 §5.6 allows (`T`,
`t` or a space between date and time, `Z`/`z` or a `±hh:mm` offset, any number of fraction
digits, a leap second), the ISO 8601 basic format the same instants are also written in
(`20261121T050000Z`, `+0530`), and, as before, a time without an offset, read as UTC.
Refused, each with its own reason: a date without a time of day (RFC 3339 has no such
date-time; reading it as midnight made phantom gaps), a date or time that does not exist
(`2026-02-30`, hour 24), anything else.

Only Spark built-in expressions (no Python UDF: executors need nothing of this package).
The gateway's own form (`2026-11-21T05:00:00.123456Z`) takes a fast path: checking the
separators' positions is much cheaper than a regular expression on every line.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

# date, optional time (hh:mm, seconds and fraction optional), optional offset; extended
# (`-`, `:`) or basic separators. Groups: 1 year, 2 month, 3 day, 4 time part, 5 hour,
# 6 minute, 7 second, 8 fraction digits, 9 offset.
DATE_TIME_RE = (
    r"^(\d{4})-?(\d{2})-?(\d{2})"
    r"([Tt ](\d{2}):?(\d{2})(?::?(\d{2})(?:[.,](\d+))?)?)?"
    r"([Zz]|[+-]\d{2}(?::?\d{2})?)?$"
)

# refusal details (the quarantine's `detail` column)
NOT_A_DATE_TIME = "not an RFC 3339 or ISO 8601 date-time"
DATE_ONLY = "a date without a time of day"
NO_SUCH_TIME = "no such date or time"


def _canonical(s: Column) -> Column:
    """`yyyy-mm-ddThh:mm:ss.ffffffZ`, the form the gateway writes (27 characters)."""
    return (
        (F.length(s) == 27)
        & (F.substring(s, 5, 1) == "-")
        & (F.substring(s, 11, 1) == "T")
        & (F.substring(s, 20, 1) == ".")
        & (F.substring(s, 27, 1) == "Z")
    )


def _part(s: Column, group: int) -> Column:
    return F.regexp_extract(s, DATE_TIME_RE, group)


def _general(s: Column) -> Column:
    """The slow path: every accepted form, through make_timestamp (null when refused)."""
    sec = F.when(_part(s, 7) == "", F.lit("0")).otherwise(_part(s, 7)).cast("int")
    frac = F.when(
        _part(s, 8) == "", F.lit(0.0)
    ).otherwise(  # microseconds: digits beyond the sixth are dropped, as Spark does
        F.concat(F.lit("0."), F.substring(_part(s, 8), 1, 6)).cast("double")
    )
    # a leap second (hh:mm:60, RFC 3339 §5.6) is the last microsecond of the minute
    seconds = F.when(sec == 60, F.lit(59.999999)).otherwise(sec + frac).cast("decimal(8,6)")
    off = _part(s, 9)
    zone = (
        F.when((off == "") | (F.upper(off) == "Z"), F.lit("UTC"))
        .when(F.length(off) == 3, F.concat(off, F.lit(":00")))
        .when(
            F.length(off) == 5, F.concat(F.substring(off, 1, 3), F.lit(":"), F.substring(off, 4, 2))
        )
        .otherwise(off)
    )
    return F.try_make_timestamp(
        _part(s, 1).cast("int"),
        _part(s, 2).cast("int"),
        _part(s, 3).cast("int"),
        _part(s, 5).cast("int"),
        _part(s, 6).cast("int"),
        seconds,
        zone,
    )


def parse(text: Column) -> Column:
    """`text` as a timestamp (UTC), null when refused (see refusal)."""
    s = F.trim(text)
    return (
        F.when(_canonical(s), F.try_to_timestamp(s))
        .when(s.rlike(DATE_TIME_RE) & (_part(s, 4) != ""), _general(s))
        .otherwise(F.lit(None).cast("timestamp"))
    )


def refusal(text: Column) -> Column:
    """Why `parse(text)` is null, in words (null when it is not)."""
    s = F.trim(text)
    return (
        F.when(text.isNull(), F.lit(None))
        .when(~s.rlike(DATE_TIME_RE), F.lit(NOT_A_DATE_TIME))
        .when(_part(s, 4) == "", F.lit(DATE_ONLY))
        .when(parse(text).isNull(), F.lit(NO_SUCH_TIME))
    )


# -- clock skew: a message's event_time minus its received_at ---------------------------------


def skew_s() -> Column:
    """The clock skew of a message (columns `event_time`, `received_at`) in seconds."""
    return (F.unix_micros("event_time") - F.unix_micros("received_at")) / F.lit(1e6)


def skew_parts() -> tuple[Column, Column]:
    """The clock skew as whole seconds and the rest in µs, two longs to sum for a mean.

    Adding doubles depends on the order, and the order a group's rows are added in depends
    on how the zone was read (which run, which files first): a mean of `skew_s` could differ
    in its last bits between a full run and incremental ones. Sums of these two are exact
    whatever the order (a device whose clock says 1970 is 1.8e15 µs off: a few such
    messages would already pass the 2^53 µs a double holds exactly)."""
    s = F.unix_seconds("event_time") - F.unix_seconds("received_at")
    us = F.unix_micros("event_time") - F.unix_micros("received_at") - s * F.lit(1_000_000)
    return s, us


def mean_skew_s(sum_s: Column, sum_us: Column, n: Column) -> Column:
    """The mean clock skew in seconds from the exact sums of `skew_parts` over `n` messages:
    the total in µs is exact as a double below 2^53 (285 years), then rounded once by each
    division (within an ulp or so of the true mean; -0.15 for -0.1 and -0.2 s, where adding
    the two parts' means gave -0.15000000000000002); the same bits in any order."""
    total_us = sum_s.cast("double") * F.lit(1e6) + sum_us
    return total_us / n / F.lit(1e6)
