"""Small file operations through Hadoop's FileSystem API (via the session's JVM), so paths
work the same on a local disk, HDFS or any other Hadoop file system the cluster has.

Only what the job needs: list names, exists, atomic rename, delete, small text files.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


class HFS:
    def __init__(self, spark: SparkSession) -> None:
        self._jvm: Any = spark.sparkContext._jvm
        self._conf: Any = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, p: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(p)

    def _fs(self, p: Any) -> Any:
        return p.getFileSystem(self._conf)

    def qualify(self, p: str) -> str:
        """`p` with its scheme (`file:/...`), as Spark reports file paths."""
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

    def read_text(self, p: str) -> str | None:
        jp = self._path(p)
        fs = self._fs(jp)
        if not fs.exists(jp):
            return None
        stream = fs.open(jp)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode()

    def write_text(self, p: str, text: str) -> None:
        """Write-then-rename, so a reader sees the old or the new content, never half."""
        tmp = p.rstrip("/").rsplit("/", 1)
        tmp_path = f"{tmp[0]}/.{tmp[1]}.tmp" if len(tmp) == 2 else f".{p}.tmp"
        jt = self._path(tmp_path)
        fs = self._fs(jt)
        out = fs.create(jt, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        jp = self._path(p)
        if fs.exists(jp):
            fs.delete(jp, False)
        fs.rename(jt, jp)
