"""Shared by the tests that run Spark drivers as child processes: the JVM class-data archive that cuts
every child's start-up several-fold."""

from __future__ import annotations

from pathlib import Path

import pyspark


def class_data_archive(cache: Path, root: Path) -> tuple[Path, str]:
    """The JVM class-data archive for this pyspark (kept in ``cache`` between sessions) and the
    options a child that makes it runs with (the archive is written to a temporary name first)."""
    archive = cache / f"repart-spark-{pyspark.__version__}.jsa"
    if archive.exists():
        return archive, f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1"
    return archive, f"-XX:ArchiveClassesAtExit={root / archive.name}"
