"""`wsn-ingest plot`: one field over time, per device, from the `aggregates` table's files.

Reads the current version of each partition of `<out>/aggregates/` with pyarrow (no JVM to
start: a plot takes a second), so `out` must be a local directory. One panel per topic (the
last segment of `topic_path`, so that temperature and light are not drawn on one axis), one
line per device (labelled with its device id, or its producer address when it has none): the
window mean, with the window's min..max as a band.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = re.compile(r"^v(\d+)$")


def current_files(root: Path) -> list[Path]:
    """The Parquet files of the current version of every partition under a table's
    directory (`date=D/hour=H/vN/`, the highest N; catalog.py and manifest.py say why
    there may be more than one for a while)."""
    files: list[Path] = []
    for part in sorted(p for p in root.glob("date=*/hour=*") if p.is_dir()):
        versions = [(int(m.group(1)), v) for v in part.iterdir() if (m := VERSION.match(v.name))]
        if versions:
            files += sorted(max(versions)[1].glob("*.parquet"))
    return files


class PlotError(Exception):
    """Nothing to draw (no aggregates, unknown field or producer, no numeric values)."""


@dataclass
class PlotResult:
    png: str
    panels: int
    series: int
    points: int


Row = dict[str, Any]


def load(out: str, field: str, producer: str | None, topic: str | None) -> list[Row]:
    """Aggregate rows of `field` with numeric values, sorted by window (pyarrow, no pandas)."""
    import pyarrow.dataset as ds

    root = Path(out) / "aggregates"
    files = current_files(root) if root.is_dir() else []
    if not files:
        raise PlotError(f"no aggregates under {root}: run `wsn-ingest batch` or `stream` first")
    dataset = ds.dataset([str(f) for f in files], format="parquet")
    has_device = True
    cols = [
        "window_start",
        "window_end",
        "producer",
        "topic_path",
        "field",
        "min",
        "max",
        "mean",
        "numeric_count",
        *(["device_id"] if has_device else []),
    ]
    flt = ds.field("field") == field
    if producer is not None:  # a device id or a producer address
        who = ds.field("producer") == producer
        if has_device:
            who = who | (ds.field("device_id") == producer)
        flt = flt & who
    rows: list[Row] = dataset.to_table(columns=cols, filter=flt).to_pylist()
    if not rows:
        fields = sorted(set(dataset.to_table(columns=["field"]).column("field").to_pylist()))
        prods = sorted(
            {
                p
                for p in dataset.to_table(columns=["producer"]).column("producer").to_pylist()
                if p is not None
            }
        )
        what = f"field {field!r}" + (f" of producer {producer!r}" if producer else "")
        raise PlotError(
            f"no aggregates for {what}; fields: {', '.join(fields) or '-'}; "
            f"producers: {', '.join(prods) or '-'}"
        )
    for r in rows:
        r["topic"] = (r["topic_path"] or "(no topic)").rsplit("/", 1)[-1]
        r["series"] = r.get("device_id") or r["producer"] or "(no device)"
    if topic is not None:
        rows = [r for r in rows if topic in (r["topic"], r["topic_path"])]
        if not rows:
            raise PlotError(f"no aggregates for field {field!r} on topic {topic!r}")
    rows = [r for r in rows if r["numeric_count"] > 0]
    if not rows:
        raise PlotError(f"field {field!r} has no numeric values to plot")
    return sorted(rows, key=lambda r: r["window_start"])


def plot(
    out: str, field: str, png: str, producer: str | None = None, topic: str | None = None
) -> PlotResult:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    rows = load(out, field, producer, topic)
    topics = sorted({r["topic"] for r in rows})
    fig, axes = plt.subplots(
        len(topics), 1, figsize=(11, 3.2 * len(topics) + 0.8), sharex=True, squeeze=False
    )
    series = 0
    for ax, t in zip(axes[:, 0], topics, strict=True):
        by_series: dict[str, list[Row]] = {}
        for r in rows:
            if r["topic"] == t:
                by_series.setdefault(r["series"], []).append(r)
        for prod in sorted(by_series):
            g = by_series[prod]
            mid = [r["window_start"] + (r["window_end"] - r["window_start"]) / 2 for r in g]
            (line,) = ax.plot(mid, [r["mean"] for r in g], marker=".", linewidth=1.2, label=prod)
            if len(by_series) <= 4:  # more bands than that hide each other
                ax.fill_between(
                    mid,
                    [r["min"] for r in g],
                    [r["max"] for r in g],
                    alpha=0.15,
                    color=line.get_color(),
                )
            series += 1
        band = ", band = min..max" if len(by_series) <= 4 else ""
        ax.set_title(f"{t}: {field} (window mean{band})", fontsize=10)
        ax.set_ylabel(field)
        ax.grid(True, alpha=0.3)
        if len(by_series) <= 12:
            ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("window (UTC)")
    # Concise labels that show seconds when the windows are seconds apart (a fixed
    # "%m-%d %H:%M" printed the same minute under every tick of a short run).
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    axes[-1, 0].xaxis.set_major_locator(locator)
    axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return PlotResult(png=png, panels=len(topics), series=series, points=len(rows))
