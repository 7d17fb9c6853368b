"""Token counts, prices and the enqueued-token budget of a run.

- :mod:`mmirage_beam.costs.tokens`: :class:`TokenCounter`, the per-request count (input
  tokens, output-token upper bound, exact or estimate) and its Beam counters.
- :mod:`mmirage_beam.costs.prices`: the dated price table (``prices.json``) and the
  config overrides; cost at the provider's batch price.
- :mod:`mmirage_beam.costs.budget`: ``max_enqueued_tokens``: SubmitChunks waits before
  creating a batch that would exceed it.
- :mod:`mmirage_beam.costs.report`: the summary lines the launchers print.
"""
