"""Thin drivers: parse flags, load the config, compose the PTransforms, run."""
