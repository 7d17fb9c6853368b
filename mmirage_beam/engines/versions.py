"""Which engine versions ``mmirage cluster`` fetches, and why these.

Checked on 2026-12-06 against what this project's machines can fetch (PyPI, Maven
Central as served here, the Go module proxy):

- **Beam's Flink job server.** Beam publishes a shaded job server per Flink version
  (``org.apache.beam:beam-runners-flink-<flink>-job-server``), but **no version of any
  of them is served here**, and neither is ``org.apache.flink:flink-dist``. What is
  served is the unshaded runner, ``org.apache.beam:beam-runners-flink-1.19``, at 2.62.0
  and 2.70.0; 2.70.0's dependency ``beam-runners-java-job-service:2.70.0`` is not
  served, 2.62.0's whole dependency tree is. So the job server is
  ``org.apache.beam.runners.flink.FlinkJobServerDriver`` run from the resolved classpath
  of ``beam-runners-flink-1.19:2.62.0`` (the same classes as Beam's shaded jar).
- **The mix.** The installed Python SDK is apache-beam 2.77.0 (requirements.txt). No
  2.77 job server is served, and pinning the SDK down to 2.62 would take pyarrow, the
  provider SDKs and every test with it, so the project runs the 2.62 Java job server
  with the 2.77 Python SDK. The Fn API and the job API are versioned protocols, and the
  mix is proved by the tests that run the pipelines on it
  (``tests/test_flink.py``: outputs byte-identical to the DirectRunner's).
- **Flink** 1.19.3, the newest 1.19 patch (the runner was built against 1.19.0; patch
  releases keep the APIs). Its jars come from PyPI's ``apache-flink-libraries`` (an
  sdist that carries ``deps/lib/flink-dist-*.jar``) and its scripts (``bin/``) from the
  ``apache-flink`` wheel, unpacked, never installed: PyFlink pins old Beam releases.
- **Prism**, Beam's Go portable runner, at the installed SDK's version, built with
  ``go install github.com/apache/beam/sdks/v2/go/cmd/prism@v<beam version>``.
- **Beam's Spark job server** (checked 2026-12-06, as for Flink). Beam's Spark 3 runner,
  ``org.apache.beam:beam-runners-spark-3``, is served at 2.62.0 and 2.70.0; 2.70.0's
  tree again needs the unserved ``beam-runners-java-job-service:2.70.0``, 2.62.0's whole
  tree resolves (131 jars). So the job server is
  ``org.apache.beam.runners.spark.SparkJobServerDriver`` of 2.62.0, run from that
  classpath. The runner declares Spark (3.2.2) ``provided``: the Spark classes come
  from the cluster's own jars, listed after Beam's (Beam needs its newer Guava first),
  with Beam's ``slf4j-api`` 1.7 and ``metrics-core`` 4.1 left out for Spark's.
- **Spark** 3.5.9, the newest 3.5 release (Scala 2.12, as ``beam-runners-spark-3``).
  Its jars come from PyPI's ``pyspark`` sdist (``deps/jars/``), unpacked, never
  installed; the master, workers and job server are started with ``java -cp``.
"""

from __future__ import annotations

#: Flink release of the cluster (PyPI ``apache-flink-libraries`` / ``apache-flink``).
FLINK_VERSION = "1.19.3"
#: The Flink minor version the Beam runner targets (``beam-runners-flink-<this>``).
FLINK_RUNNER_FLINK = "1.19"
#: Beam Java release of the Flink job server (the newest whose tree is served here).
BEAM_JOB_SERVER_VERSION = "2.62.0"
#: slf4j binding for the job server's log (the job server jar Beam ships bundles it).
SLF4J_VERSION = "1.7.30"
#: Spark release of the standalone cluster (PyPI ``pyspark`` sdist, its ``deps/jars``).
SPARK_VERSION = "3.5.9"
#: Scala version of those jars (and of ``beam-runners-spark-3``).
SPARK_SCALA_VERSION = "2.12"
#: Beam Java release of the Spark job server (the newest whose tree is served here).
SPARK_JOB_SERVER_VERSION = "2.62.0"
#: Go module of Beam's Prism runner.
PRISM_MODULE = "github.com/apache/beam/sdks/v2/go/cmd/prism"


def beam_sdk_version() -> str:
    """The installed Python SDK's version (``apache_beam.__version__``)."""
    import apache_beam

    return apache_beam.__version__
