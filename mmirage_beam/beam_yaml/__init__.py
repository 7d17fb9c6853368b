"""Beam YAML: the submit and merge stages as transforms a YAML pipeline names, with no
Python to write (``docs/beam-yaml.md``).

- :mod:`~mmirage_beam.beam_yaml.transforms`: ``SubmitBatches`` and ``MergeBatches``
  (``constructor: mmirage_beam.beam_yaml.transforms.SubmitBatches``).
- :mod:`~mmirage_beam.beam_yaml.config`: the transforms' arguments -> a checked
  :class:`~mmirage_beam.config.loader.PipelineConfig`, errors naming the YAML key.
- :mod:`~mmirage_beam.beam_yaml.rows`: Beam rows <-> the dicts the pipeline reads.

May import everything below the drivers (``transforms/``, ``run/``, ``config/``...);
nothing imports it (Beam YAML loads it by name).
"""
