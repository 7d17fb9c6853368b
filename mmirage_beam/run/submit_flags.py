"""The flags of ``mmirage run`` and the record that holds them.

:func:`add_submit_arguments` adds them to the driver's parser (``pipelines/submit.py``;
``mmirage run --help`` imports this module: it stays light, no Beam);
:class:`SubmitFlags` is what :mod:`mmirage_beam.run.submit_plans` reads of them. The
``--wait`` flags are :mod:`mmirage_beam.cycle.flags`'.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Optional

from mmirage_beam.paths import path_argument

__all__ = ["SubmitFlags", "add_submit_arguments"]


def add_submit_arguments(ap: argparse.ArgumentParser) -> None:
    """The flags of ``mmirage run`` but ``--wait``'s and ``--verbose``."""
    ap.add_argument("--config", required=True, help="MMIRAGE-compatible YAML config")
    ap.add_argument(
        "--export-prompts",
        metavar="PATH",
        type=path_argument,
        help="dry run: write provider-ready requests to PATH (.jsonl file, else a folder); "
        "no API key needed, nothing is submitted",
    )
    ap.add_argument("--run-id", help="use this run id instead of a fresh one")
    ap.add_argument(
        "--new-run",
        action="store_true",
        help="submit even when an earlier run of the same config and data exists (by "
        "default such a run is named and nothing is sent; exit 3)",
    )
    ap.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="a cheap trial: only the first N rows by source_index, as a run of its own "
        "(its own fingerprint; resumes and merges of it read only those rows)",
    )
    ap.add_argument(
        "--skip-invalid-rows",
        action="store_true",
        default=None,
        help="submit the valid rows even when some rows are invalid (they are listed in "
        "the invalid-rows file)",
    )
    ap.add_argument(
        "--exact-tokens",
        action="store_true",
        help="count input tokens with the provider's own free counting endpoint where it "
        "has one (needs the provider's key, one call per request; docs/providers.md lists "
        "which providers have one); same as exact_tokens: true in the processor",
    )
    ap.add_argument(
        "--estimate",
        choices=("exact", "sample"),
        default="exact",
        help="how the token and cost estimate counts: exact (default) counts every "
        "request; sample counts only a deterministic share of them (--estimate-fraction, "
        "chosen by custom_id) and extrapolates, with a 95%% error bound in its label: a "
        "faster dry run; the requests themselves are the same",
    )
    ap.add_argument(
        "--estimate-fraction",
        metavar="F",
        default=None,
        help="with --estimate sample: the share of requests counted, 0 < F <= 1 (default 0.01)",
    )
    ap.add_argument(
        "--no-reuse",
        action="store_true",
        help="send every request, even those whose exact body an earlier run under the "
        "same metadata base already answered (by default their answers are reused, not "
        "bought again); same as execution_params.reuse_answers: false",
    )
    ap.add_argument(
        "--keep-staged",
        action="store_true",
        help="keep the staged chunk files (<metadata base>.staged.<run_id>/) after the run "
        "instead of removing them",
    )
    ap.add_argument(
        "--skip-space-check",
        action="store_true",
        help="start even when the local disk for the staged chunks seems too small",
    )


@dataclasses.dataclass(frozen=True)
class SubmitFlags:
    """The flags of ``mmirage run`` that its plan reads (``--config`` as given, and the
    Beam options left over, for the commands it names)."""

    config: str
    beam_args: tuple[str, ...] = ()
    export_prompts: Optional[str] = None
    run_id: Optional[str] = None
    new_run: bool = False
    limit: Optional[int] = None
    skip_invalid_rows: Optional[bool] = None
    exact_tokens: bool = False
    estimate: str = "exact"
    estimate_fraction: Any = None
    no_reuse: bool = False
    keep_staged: bool = False
    skip_space_check: bool = False
    #: ``--wait`` and the cycle's flags as given (set by
    #: :class:`~mmirage_beam.cycle.loop.CycleCommand`)
    wait: Optional[bool] = None
    #: the cycle's flags as given (``--output-path OUT``, ``--retries N``...), kept in
    #: the commands a ``--wait`` run names (issue 38: the exit-3 advice dropped them)
    wait_args: tuple[str, ...] = ()

    @property
    def dry_run(self) -> bool:
        """``--export-prompts``: nothing is submitted."""
        return self.export_prompts is not None
