"""Small file operations through Hadoop's FileSystem API (via the session's JVM), so paths
work the same on a local disk, HDFS or any other Hadoop file system the cluster has.

Only what the job needs: list names, exists, atomic rename, delete, small text files, an
exclusive create (the lock of a run).
"""

from __future__ import annotations

import os
import stat
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from spark_ingest.jvm import java_class

# Hadoop's file systems of `file:` paths. A landing zone grows by a file a minute for good
# (the gateway's default rotation), and every incremental run lists it whole: through py4j
# that is about five round trips a file, 9.2 s for a zone of 20,000 files (two weeks),
# where the operating system lists it in milliseconds. Their entries are read here as
# Hadoop would give them. The file systems, and whether they hide checksum files: Hadoop's
# own, and the one Spark's bundled Hive configures for `file:` (a FilterFileSystem over
# Hadoop's LocalFileSystem).
LOCAL_FILE_SYSTEMS = {
    "org.apache.hadoop.fs.LocalFileSystem": True,
    "org.apache.hadoop.fs.RawLocalFileSystem": False,
    "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem": True,
}


def _local_entries(
    qualified: str, local: str, checksums: bool
) -> list[tuple[str, bool, int, int, str]]:
    """`listStatus` of the local directory `local` (qualified: `qualified`): (path, is a
    directory, bytes, modification time in ms, the operating system's path) of each entry;
    its path is the directory's and its name; a symbolic link is what it points to; an
    entry gone or dangling before it could be read is left out, and so are the checksum
    files (`.name.crc`) where Hadoop's file system keeps them (`checksums`)."""
    base = qualified.rstrip("/")
    out = []
    with os.scandir(local) as it:
        for e in it:
            if checksums and e.name.startswith(".") and e.name.endswith(".crc"):
                continue
            try:
                st = e.stat()
            except FileNotFoundError:
                continue
            # Java's File.lastModified, which Hadoop reports: whole milliseconds
            ms = st.st_mtime_ns // 1_000_000
            path = f"{base}/{e.name}"
            out.append((path, stat.S_ISDIR(st.st_mode), int(st.st_size), ms, e.path))
    return out


class HFS:
    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._conf: Any = spark.sparkContext._jsc.hadoopConfiguration()
        self._Path: Any = java_class(spark, "org.apache.hadoop.fs.Path")
        self._IOUtils: Any = java_class(spark, "org.apache.commons.io.IOUtils")
        #: qualified path -> (modification time in ms, the operating system's path) of each
        #: local file a listing gave: its path is qualified already, and a landing file
        #: does not change once published, so a run asks nothing more of the files it
        #: listed through py4j (their modification times, and their bytes, are local)
        self._listed: dict[str, tuple[int, str]] = {}

    def _path(self, p: str) -> Any:
        return self._Path(p)

    def _fs(self, p: Any) -> Any:
        return p.getFileSystem(self._conf)

    def qualify(self, p: str) -> str:
        """`p` with its scheme (`file:/...`), as Spark reports file paths."""
        if p in self._listed:
            return p
        jp = self._path(p)
        return str(self._fs(jp).makeQualified(jp).toString())

    def exists(self, p: str) -> bool:
        jp = self._path(p)
        return bool(self._fs(jp).exists(jp))

    def names(self, directory: str) -> list[str]:
        """Names of the entries of `directory` ([] when it does not exist)."""
        jp = self._path(directory)
        fs = self._fs(jp)
        if not fs.exists(jp):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(jp))

    def sizes(self, directory: str) -> dict[str, int]:
        """Bytes of each entry of `directory` by name ({} when it does not exist)."""
        jp = self._path(directory)
        fs = self._fs(jp)
        if not fs.exists(jp):
            return {}
        return {str(s.getPath().getName()): int(s.getLen()) for s in fs.listStatus(jp)}

    def glob(self, pattern: str) -> list[tuple[str, bool, int]]:
        """(qualified path, is a directory, bytes) of what `pattern` names: Hadoop's glob
        (`*`, `?`, `[ab]`, `{a,b}`), a plain path or URI naming itself; [] for nothing."""
        jp = self._path(pattern)
        found = self._fs(jp).globStatus(jp)
        if found is None:
            return []
        return [
            (str(s.getPath().toString()), bool(s.isDirectory()), int(s.getLen())) for s in found
        ]

    def entries(self, directory: str) -> list[tuple[str, bool, int]]:
        """(qualified path, is a directory, bytes) of each entry of `directory`, as Hadoop's
        `listStatus` gives them (checksum files left out on the local file system)."""
        jp = self._path(directory)
        fs = self._fs(jp)
        qualified = fs.makeQualified(jp)
        kind = str(fs.getClass().getName())
        if kind in LOCAL_FILE_SYSTEMS:
            local = str(qualified.toUri().getPath())
            found = _local_entries(str(qualified.toString()), local, LOCAL_FILE_SYSTEMS[kind])
            self._listed.update((path, (ms, os_path)) for path, _d, _b, ms, os_path in found)
            return [(path, d, b) for path, d, b, _ms, _os in found]
        return [
            (str(s.getPath().toString()), bool(s.isDirectory()), int(s.getLen()))
            for s in fs.listStatus(jp)
        ]

    def mkdirs(self, p: str) -> None:
        jp = self._path(p)
        self._fs(jp).mkdirs(jp)

    def delete(self, p: str) -> None:
        jp = self._path(p)
        self._fs(jp).delete(jp, True)

    def rename(self, src: str, dst: str) -> bool:
        """Atomic on a local disk and HDFS (not on object stores: see docs)."""
        s, d = self._path(src), self._path(dst)
        return bool(self._fs(s).rename(s, d))

    def modified_ms(self, p: str) -> int | None:
        """Modification time of `p` in ms since the epoch (None when it does not exist); of
        a file a local listing gave, its time then."""
        if p in self._listed:
            return self._listed[p][0]
        jp = self._path(p)
        fs = self._fs(jp)
        if not fs.exists(jp):
            return None
        return int(fs.getFileStatus(jp).getModificationTime())

    def create_exclusive(self, p: str, text: str) -> bool:
        """Create `p` with `text` unless it exists (False then): atomic on a local disk and
        HDFS (the create fails when another process created it first)."""
        jp = self._path(p)
        fs = self._fs(jp)
        try:
            out = fs.create(jp, False)
        except Exception as e:  # FileAlreadyExistsException, through py4j
            if "FileAlreadyExists" in str(e) or fs.exists(jp):
                return False
            raise
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        return True

    def _local(self, p: str) -> tuple[Any, str | None]:
        """`p` as a Hadoop path (None when a listing gave it), and its operating system's
        path when its file system is a local one."""
        if p in self._listed:
            return None, self._listed[p][1]
        jp = self._path(p)
        fs = self._fs(jp)
        if str(fs.getClass().getName()) not in LOCAL_FILE_SYSTEMS:
            return jp, None
        return jp, str(fs.makeQualified(jp).toUri().getPath())

    def parquet_rows(self, p: str) -> int | None:
        """The rows the footer of the Parquet file `p` counts; None when no footer can be
        read. A local file's footer is read by pyarrow (no round trip through py4j)."""
        jp, local = self._local(p)
        if local is not None:
            try:
                import pyarrow.parquet as pq
            except ImportError:  # the spark extra brings it; without it, Hadoop's reader
                pass
            else:
                try:
                    return int(pq.read_metadata(local).num_rows)
                except (OSError, ValueError):  # ArrowInvalid is a ValueError
                    return None
        reader_class = java_class(self._spark, "org.apache.parquet.hadoop.ParquetFileReader")
        input_file = java_class(self._spark, "org.apache.parquet.hadoop.util.HadoopInputFile")
        try:
            reader = reader_class.open(input_file.fromPath(jp or self._path(p), self._conf))
        except Py4JJavaError:
            return None
        try:
            return int(reader.getRecordCount())
        finally:
            reader.close()

    def read_bytes_at(self, p: str, offset: int, length: int) -> bytes:
        """`length` bytes of `p` from `offset` (the caller keeps within the file)."""
        jp, local = self._local(p)
        if local is not None:  # a landing file's markers, two reads a Parquet file: no py4j
            with open(local, "rb") as fh:
                fh.seek(offset)
                return fh.read(length)
        stream = self._fs(jp).open(jp)
        try:
            stream.seek(offset)
            data = self._IOUtils.toByteArray(stream, length)
        finally:
            stream.close()
        return bytes(data)

    def read_text(self, p: str) -> str | None:
        """The text of `p` (None when it does not exist). On a local disk it is read by the
        operating system: through py4j 5 MB took 0.28-0.38 s (3-8 ms read here), and
        the manifest's state and records, up to MBs, are read at every run."""
        jp = self._path(p)
        fs = self._fs(jp)
        if str(fs.getClass().getName()) in LOCAL_FILE_SYSTEMS:
            try:
                with open(str(fs.makeQualified(jp).toUri().getPath()), "rb") as fh:
                    return fh.read().decode()
            except (FileNotFoundError, NotADirectoryError):
                return None
        if not fs.exists(jp):
            return None
        stream = fs.open(jp)
        try:
            data = self._IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode()

    def _write_tmp(self, p: str, text: str) -> Any:
        head, _, name = p.rstrip("/").rpartition("/")
        jt = self._path(f"{head}/.{name}.tmp" if head else f".{name}.tmp")
        out = self._fs(jt).create(jt, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        return jt

    def write_once(self, p: str, text: str) -> None:
        """Create `p` whole (temp file, then rename) unless it exists: `p` is never seen
        half written and never missing once created."""
        jp = self._path(p)
        fs = self._fs(jp)
        if fs.exists(jp):
            return
        jt = self._write_tmp(p, text)
        if not fs.rename(jt, jp):
            fs.delete(jt, False)

    def write_text(self, p: str, text: str) -> None:
        """Replace `p` (summaries: a reader may briefly find it missing, never half)."""
        jp = self._path(p)
        fs = self._fs(jp)
        jt = self._write_tmp(p, text)
        if fs.exists(jp):
            fs.delete(jp, False)
        fs.rename(jt, jp)
