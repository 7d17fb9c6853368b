"""Beam PTransforms of mmirage-beam, one public PTransform per concept.

Import each transform from its own module (e.g. ``mmirage_beam.transforms.chunking``);
this package deliberately imports none of them so modules stay independent.
"""
