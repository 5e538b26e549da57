"""Listing a directory (spark_ingest/hfs.py, HFS.entries): on a local disk the entries are
read without a round trip per file, and they must be exactly those Hadoop's own
`listStatus` gives, which the rest of the job (and Spark's file paths) was built on; so
must what a run asks next of the files listed (qualified path, modification time)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spark_ingest.hfs import HFS, LOCAL_FILE_SYSTEMS


def _hadoop(spark: Any, directory: str) -> list[tuple[str, bool, int]]:
    """What Hadoop's file system of `directory` lists, asked entry by entry."""
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(directory)
    fs = p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return [
        (str(s.getPath().toString()), bool(s.isDirectory()), int(s.getLen()))
        for s in fs.listStatus(p)
    ]


def test_a_local_listing_is_hadoops(spark: Any, tmp_path: Path) -> None:
    zone, elsewhere = tmp_path / "zone with a blank", tmp_path / "elsewhere"
    zone.mkdir()
    elsewhere.mkdir()
    (zone / "landing-20261121T050000-000001.jsonl").write_text('{"id":"a"}\n')
    (zone / "landing-20261121T050100-000002.parquet").write_bytes(b"PAR1" + bytes(100))
    (zone / ".landing-20261121T050200-000003.jsonl.tmp").write_text("being written")
    (zone / ".landing-20261121T050000-000001.jsonl.crc").write_bytes(b"crc")  # Hadoop's
    (zone / "_SUCCESS").write_text("")
    (zone / "readings é.json").write_text("{}")
    (zone / "old").mkdir()
    (elsewhere / "landing-x.jsonl").write_text("0123456789")
    os.symlink(elsewhere / "landing-x.jsonl", zone / "landing-20261121T050300-000004.jsonl")
    os.symlink(elsewhere, zone / "linked-dir")
    os.symlink(tmp_path / "gone", zone / "landing-20261121T050400-000005.jsonl")  # dangling
    hfs = HFS(spark)
    # the session's file system for local paths is one read without Hadoop (else this test
    # would compare Hadoop with itself)
    jp = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(str(zone))
    fs = jp.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    assert str(fs.getClass().getName()) in LOCAL_FILE_SYSTEMS
    for given in (str(zone), f"file://{zone}", f"{zone}/"):
        mine = sorted(hfs.entries(given))
        assert mine == sorted(_hadoop(spark, given)), given
    names = {p.rsplit("/", 1)[1]: (d, b) for p, d, b in hfs.entries(str(zone))}
    # the listing holds what the cases are about (not an empty one matching an empty one)
    assert names["landing-20261121T050300-000004.jsonl"] == (False, 10)  # the link's target
    assert names["linked-dir"][0] and names["old"][0]
    assert "readings é.json" in names and ".landing-20261121T050000-000001.jsonl.crc" not in names
    assert "landing-20261121T050400-000005.jsonl" not in names
    # what a run asks next of the files it listed: their qualified path and modification
    # time, answered from the listing, as Hadoop answers them
    jvm = spark.sparkContext._jvm
    for path, _d, _b in hfs.entries(str(zone)):
        jp = jvm.org.apache.hadoop.fs.Path(path)
        hadoop_fs = jp.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        assert hfs.qualify(path) == str(hadoop_fs.makeQualified(jp).toString()) == path
        assert hfs.modified_ms(path) == int(hadoop_fs.getFileStatus(jp).getModificationTime())


def test_a_local_file_reads_as_hadoop_reads_it(spark: Any, tmp_path: Path) -> None:
    # the manifest's files: JSON, UTF-8 beyond ASCII, a few MB for a zone of weeks
    text = (
        '{"files": {'
        + ",".join(f'"file:/z/landing-{i}-é.jsonl": {i}' for i in range(50_000))
        + "}}"
    )
    f = tmp_path / "state-0000000001.json"
    f.write_text(text, encoding="utf-8")
    hfs = HFS(spark)
    jvm = spark.sparkContext._jvm
    jp = jvm.org.apache.hadoop.fs.Path(str(f))
    stream = jp.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(jp)
    try:
        hadoops = bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode()
    finally:
        stream.close()
    for given in (str(f), f"file://{f}"):
        assert hfs.read_text(given) == hadoops == text
    assert hfs.read_text(str(tmp_path / "absent.json")) is None
    assert hfs.read_text(str(f / "under-a-file.json")) is None


def test_a_parquet_footer_and_markers_read_as_hadoop_reads_them(
    spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """What a run checks of each new Parquet file (consume.damaged, consume.short): its
    markers' bytes and the rows its footer counts, read on a local disk without py4j, are
    what Hadoop's and Parquet's own readers give; a footer that cannot be read is None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "landing-1.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), f, row_group_size=300)
    torn = tmp_path / "landing-2.parquet"
    data = bytearray(f.read_bytes())
    data[-12:-8] = b"\xff\xff\xff\xff"  # the footer's last bytes: no longer a footer
    torn.write_bytes(bytes(data))
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
        jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
            jvm.org.apache.hadoop.fs.Path(str(f)), conf
        )
    )
    try:
        parquets = int(reader.getRecordCount())
    finally:
        reader.close()
    size = f.stat().st_size

    def read(hfs: HFS, good: str, bad: str) -> tuple[Any, ...]:
        return (
            hfs.read_bytes_at(good, size - 8, 8),
            hfs.read_bytes_at(good, 0, 4),
            hfs.parquet_rows(good),
            hfs.parquet_rows(bad),
        )

    local = read(HFS(spark), str(f), str(torn))
    # as a run asks, of the paths its listing gave (HFS._listed: no py4j at all)
    listed = HFS(spark)
    paths = {p.rsplit("/", 1)[-1]: p for p, _d, _b in listed.entries(f"file://{tmp_path}")}
    assert read(listed, paths[f.name], paths[torn.name]) == local
    # Hadoop's way, as on HDFS or an object store
    monkeypatch.setattr("spark_ingest.hfs.LOCAL_FILE_SYSTEMS", {})
    hadoop = read(HFS(spark), f"file://{f}", str(torn))
    tail = bytes(f.read_bytes()[-8:])
    assert local == hadoop == (tail, b"PAR1", parquets, None)
    assert parquets == 1000
