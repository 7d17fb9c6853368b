"""Real engines on this machine, started and stopped by ``mmirage cluster``
(``pipelines/cluster.py``; docs/scale.md, docs/architecture.md "Engines").

- :mod:`~mmirage_beam.engines.cluster`: an engine's folder and ``cluster.json``, and
  :func:`~mmirage_beam.engines.cluster.start_cluster`, the one start of a master, its
  workers and Beam's job server, given the ``Engine`` that says what differs;
- :mod:`~mmirage_beam.engines.flink`, :mod:`~mmirage_beam.engines.spark`,
  :mod:`~mmirage_beam.engines.prism`: each engine's own steps;
- :mod:`~mmirage_beam.engines.provision`, :mod:`~mmirage_beam.engines.versions`: the
  engines fetched into the cache (PyPI, Maven Central, ``go install``);
- :mod:`~mmirage_beam.engines.processes`, :mod:`~mmirage_beam.engines.sdk_boot`: daemons,
  ports, and the SDK workers' boot script.

Imports only the leaf modules; imported by ``pipelines/cluster.py`` and the benchmarks.
"""
