"""Token counts, prices and the cost lines (the enqueued-token budget, which reads a run's
receipts, is :mod:`mmirage_beam.run.budget`).

- :mod:`mmirage_beam.costs.tokens`: :class:`TokenCounter`, the per-request count (input
  tokens, output-token upper bound, exact or estimate) and its Beam counters.
- :mod:`mmirage_beam.costs.prices`: the dated price table (``prices.json``) and the
  config overrides; cost at the provider's batch price.
- :mod:`mmirage_beam.costs.report`: the summary lines the launchers print.
"""
