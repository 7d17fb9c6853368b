"""mmirage-beam: provider batch-API pipelines (OpenAI, Anthropic) on Apache Beam.

Public PTransforms (compose them into your own Beam pipelines):
``mmirage_beam.io.readers.ReadDatasets``, ``mmirage_beam.transforms.build.ExtractInputs``,
``mmirage_beam.transforms.build.BuildRequests``,
``mmirage_beam.transforms.chunking.ChunkRequests``,
``mmirage_beam.transforms.submit.SubmitChunks``,
``mmirage_beam.transforms.rows.RenderPlaceholderRows``; the whole submit graph:
``mmirage_beam.pipeline.build_submit_pipeline``.
"""

__version__ = "0.1.0"
