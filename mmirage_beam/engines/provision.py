"""Fetch a local engine's pieces into a cache, with the registries' ordinary clients.

- Flink (:func:`flink_home`): ``pip download`` of ``apache-flink-libraries`` (the jars)
  and ``apache-flink`` (the ``bin/`` scripts and the default ``conf/``), unpacked into
  ``<cache>/flink-<version>/``, never installed (see ``versions.py``).
- Beam's Flink job server (:func:`flink_job_server_classpath`): ``mvn
  dependency:copy-dependencies`` of ``beam-runners-flink-1.19`` into
  ``<cache>/beam-flink-<flink>-job-server-<beam>/lib/``.
- Prism (:func:`prism_binary`): ``go install`` into ``<cache>/prism-<beam>/``.
- Spark (:func:`spark_home`): ``pip download`` of the ``pyspark`` sdist, its
  ``deps/jars/`` unpacked into ``<cache>/spark-<version>/jars/``, never installed.
- Beam's Spark job server (:func:`spark_job_server_classpath`): ``mvn
  dependency:copy-dependencies`` of ``beam-runners-spark-3`` into
  ``<cache>/beam-spark-3-job-server-<beam>/lib/``.

The cache is ``$MMIRAGE_ENGINE_CACHE``, else ``~/.cache/mmirage-beam/engines``. Each
piece is built in a temporary folder beside its final one and renamed into place, so a
piece in the cache is whole; a second call returns at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Optional, Sequence

from mmirage_beam.engines import versions
from mmirage_beam.engines.processes import EngineError

CACHE_ENV_VAR = "MMIRAGE_ENGINE_CACHE"
Say = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


def cache_dir() -> Path:
    """Where fetched engines are kept (``$MMIRAGE_ENGINE_CACHE`` or
    ``~/.cache/mmirage-beam/engines``)."""
    env = os.environ.get(CACHE_ENV_VAR)
    return Path(env) if env else Path.home() / ".cache" / "mmirage-beam" / "engines"


def _run(what: str, argv: Sequence[str], cwd: Path, timeout: float, env: Optional[dict] = None):
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise EngineError(f"{what}: {argv[0]} is not installed ({exc})") from exc
    except subprocess.TimeoutExpired as exc:
        raise EngineError(
            f"{what}: {' '.join(argv[:3])} ... timed out after {timeout:.0f}s"
        ) from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise EngineError(f"{what}: {' '.join(argv[:4])} ... failed ({proc.returncode}):\n{tail}")
    return proc


def _pip_download(what: str, dest: Path, *specs: str) -> None:
    """``pip download --no-deps`` of ``specs`` into ``dest`` (pip prepares an sdist's metadata;
    nothing is installed)."""
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest)]
    _run(what, [*argv, *specs], dest.parent, timeout=1200)


def _maven_copy_dependencies(what: str, project: Path) -> None:
    """``mvn dependency:copy-dependencies`` of ``project/pom.xml`` into ``project/lib``."""
    argv = ["mvn", "-q", "-B", "dependency:copy-dependencies"]
    _run(what, [*argv, f"-DoutputDirectory={project / 'lib'}"], project, timeout=1200)


def _build(final: Path, build: Callable[[Path], None]) -> Path:
    """``build(tmp)`` in a fresh folder beside ``final``, then renamed to ``final``."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not final.is_dir():  # not a concurrent fetch that got there first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _extract_below(archive: Path, prefix: str, dest: Path, into: str = "") -> None:
    """Extract the files of the tar ``archive`` whose path starts with ``prefix`` into
    ``dest``, each at its path less ``prefix`` (after ``into``); other members are left.

    Raises:
        tarfile.TarError, OSError: the archive cannot be read or a file written (also a
            member the ``data`` extraction filter refuses).
    """
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.startswith(prefix) and member.isfile():
                member.name = into + member.name[len(prefix) :]
                tar.extract(member, dest, filter="data")


def flink_home(cache: Optional[Path] = None, say: Say = _quiet) -> Path:
    """A Flink distribution folder (``bin/``, ``lib/``, ``conf/``) of
    :data:`versions.FLINK_VERSION`, fetched from PyPI on first use.

    Raises:
        EngineError: pip could not download it, or the archives lack the expected files.
    """
    version = versions.FLINK_VERSION
    final = (cache or cache_dir()) / f"flink-{version}"

    def build(tmp: Path) -> None:
        say(f"fetching Flink {version} from PyPI (apache-flink-libraries, apache-flink; ~235 MB)")
        dl = tmp / "download"
        _pip_download(
            "fetch Flink", dl, f"apache-flink-libraries=={version}", f"apache-flink=={version}"
        )
        libs = next(dl.glob("apache-flink-libraries-*.tar.gz"), None)
        wheel = next(dl.glob("apache_flink-*.whl"), None)
        if libs is None or wheel is None:
            raise EngineError(f"fetch Flink: pip downloaded {sorted(os.listdir(dl))}")
        home = tmp
        _extract_below(libs, f"apache-flink-libraries-{version}/deps/", home)
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                for part in ("bin", "conf"):
                    if name.startswith(f"pyflink/{part}/") and not name.endswith("/"):
                        target = home / part / name[len(f"pyflink/{part}/") :]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(zf.read(name))
        for script in (home / "bin").glob("*.sh"):
            script.chmod(0o755)
        (home / "bin" / "flink").chmod(0o755)
        if not list((home / "lib").glob("flink-dist-*.jar")):
            raise EngineError(f"fetch Flink: no lib/flink-dist-*.jar in {libs.name}")
        shutil.rmtree(dl)

    return _build(final, build)


_POM_HEAD = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>mmirage-beam</groupId>
  <artifactId>{artifact}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
"""
_POM_TAIL = """  </dependencies>
</project>
"""


def _pom(artifact: str, dependencies: str) -> str:
    """The ``pom.xml`` of a throw-away Maven project whose only use is to have Maven copy
    ``dependencies`` (``<dependency>`` elements, indented as in the file) and their
    dependency tree; ``artifact`` names the project."""
    return _POM_HEAD.format(artifact=artifact) + dependencies + _POM_TAIL


_POM = _pom(
    "flink-job-server-classpath",
    """    <dependency>
      <groupId>org.apache.beam</groupId>
      <artifactId>beam-runners-flink-{flink}</artifactId>
      <version>{beam}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-jdk14</artifactId>
      <version>{slf4j}</version>
    </dependency>
""",
)


def flink_job_server_classpath(cache: Optional[Path] = None, say: Say = _quiet) -> Path:
    """The folder of jars that runs Beam's Flink job server
    (``org.apache.beam.runners.flink.FlinkJobServerDriver``), resolved by Maven.

    Raises:
        EngineError: Maven is missing or could not resolve the dependency tree.
    """
    flink, beam = versions.FLINK_RUNNER_FLINK, versions.BEAM_JOB_SERVER_VERSION
    final = (cache or cache_dir()) / f"beam-flink-{flink}-job-server-{beam}"

    def build(tmp: Path) -> None:
        say(f"fetching Beam's Flink {flink} job server {beam} from Maven Central (~150 MB)")
        (tmp / "pom.xml").write_text(
            _POM.format(flink=flink, beam=beam, slf4j=versions.SLF4J_VERSION), encoding="utf-8"
        )
        _maven_copy_dependencies("fetch the Flink job server", tmp)
        if not list((tmp / "lib").glob(f"beam-runners-flink-{flink}-*.jar")):
            raise EngineError("fetch the Flink job server: Maven copied no runner jar")

    return _build(final, build)


def prism_binary(cache: Optional[Path] = None, say: Say = _quiet) -> Path:
    """Beam's Prism runner binary at the installed SDK's version, built by ``go install``.

    Raises:
        EngineError: Go is missing or the build failed.
    """
    beam = versions.beam_sdk_version()
    final = (cache or cache_dir()) / f"prism-{beam}"

    def build(tmp: Path) -> None:
        say(f"building Beam's Prism runner {beam} with go install (a few minutes the first time)")
        env = {**os.environ, "GOBIN": str(tmp), "GOFLAGS": "-mod=mod"}
        _run(
            "build Prism",
            ["go", "install", f"{versions.PRISM_MODULE}@v{beam}"],
            tmp,
            timeout=1800,
            env=env,
        )
        if not (tmp / "prism").is_file():
            raise EngineError("build Prism: go install left no prism binary")

    return _build(final, build) / "prism"


def spark_home(cache: Optional[Path] = None, say: Say = _quiet) -> Path:
    """A Spark folder (``jars/``: Spark's own jars, Scala
    :data:`versions.SPARK_SCALA_VERSION`) of :data:`versions.SPARK_VERSION`, fetched from
    PyPI's ``pyspark`` sdist on first use (its ``deps/jars/``; PySpark is not installed).

    Raises:
        EngineError: pip could not download it, or the archive lacks Spark's core jar.
    """
    version = versions.SPARK_VERSION
    final = (cache or cache_dir()) / f"spark-{version}"

    def build(tmp: Path) -> None:
        say(f"fetching Spark {version} from PyPI (the pyspark sdist, its jars; ~320 MB)")
        dl = tmp / "download"
        _pip_download("fetch Spark", dl, f"pyspark=={version}")
        sdist = next(dl.glob(f"pyspark-{version}.tar.gz"), None)
        if sdist is None:
            raise EngineError(f"fetch Spark: pip downloaded {sorted(os.listdir(dl))}")
        _extract_below(sdist, f"pyspark-{version}/deps/jars/", tmp, into="jars/")
        core = f"spark-core_{versions.SPARK_SCALA_VERSION}-{version}.jar"
        if not (tmp / "jars" / core).is_file():
            raise EngineError(f"fetch Spark: no jars/{core} in {sdist.name}")
        shutil.rmtree(dl)

    return _build(final, build)


_SPARK_POM = _pom(
    "spark-job-server-classpath",
    """    <dependency>
      <groupId>org.apache.beam</groupId>
      <artifactId>beam-runners-spark-3</artifactId>
      <version>{beam}</version>
      <exclusions>
        <!-- Spark's own (newer) ones are on the classpath: slf4j 2 with its log4j2
             binding, and the metrics library Spark's metrics system is built on. -->
        <exclusion>
          <groupId>org.slf4j</groupId>
          <artifactId>slf4j-api</artifactId>
        </exclusion>
        <exclusion>
          <groupId>io.dropwizard.metrics</groupId>
          <artifactId>metrics-core</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
""",
)


def spark_job_server_classpath(cache: Optional[Path] = None, say: Say = _quiet) -> Path:
    """The folder of Beam's jars that, followed by Spark's own (:func:`spark_home`), run
    Beam's Spark job server (``org.apache.beam.runners.spark.SparkJobServerDriver``),
    resolved by Maven. ``beam-runners-spark-3`` declares Spark ``provided``, so no Spark
    jar is in it.

    Raises:
        EngineError: Maven is missing or could not resolve the dependency tree.
    """
    beam = versions.SPARK_JOB_SERVER_VERSION
    final = (cache or cache_dir()) / f"beam-spark-3-job-server-{beam}"

    def build(tmp: Path) -> None:
        say(f"fetching Beam's Spark 3 job server {beam} from Maven Central (~95 MB)")
        (tmp / "pom.xml").write_text(_SPARK_POM.format(beam=beam), encoding="utf-8")
        _maven_copy_dependencies("fetch the Spark job server", tmp)
        if not (tmp / "lib" / f"beam-runners-spark-3-{beam}.jar").is_file():
            raise EngineError("fetch the Spark job server: Maven copied no runner jar")

    return _build(final, build)
