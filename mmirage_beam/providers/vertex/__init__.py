"""``provider: vertex``: Vertex AI batch prediction for Gemini models (google-genai SDK
with ``vertexai=True``; input and output in Cloud Storage).

Everything specific to it lives here: ``config`` (the config dataclass, its limits and
their sources), ``adapter`` (staging, submission, status, results), ``outcomes`` (the
custom_id in ``request.labels``, prediction lines read), ``prices.json`` (its dated
price rows) and ``fake`` (the fake Vertex AI service the tests and the demo talk to,
its job files in a GCS emulator). Importing the package registers the config and the
adapter under ``vertex``; the SDK is imported only when a client is built (``pip install
'mmirage-beam[gemini,gcp]'``).
"""

from mmirage_beam.providers.base import register_provider
from mmirage_beam.providers.vertex.adapter import VertexBatchAdapter
from mmirage_beam.providers.vertex.config import VertexBatchConfig

register_provider("vertex", VertexBatchConfig, VertexBatchAdapter)

# Its fake is a server of its own on a GCS emulator, not a handler of the shared port:
# it registers for ``mmirage demo --provider vertex`` (fake.VertexDemo.demo).
from mmirage_beam.testing.fake_registry import register_fake  # noqa: E402

register_fake("vertex", "mmirage_beam.providers.vertex.fake:VertexDemo")

__all__ = ["VertexBatchAdapter", "VertexBatchConfig"]
