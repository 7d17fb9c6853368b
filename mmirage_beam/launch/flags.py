"""The Beam flags a driver takes: every argument is the tool's or a Beam pipeline option
(:func:`check_beam_args`), the ``PipelineOptions`` built from them, and the filesystem
flags of the commands that run no pipeline; storage secrets are never flags."""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

from mmirage_beam.errors import ConfigError
from mmirage_beam.io.filesystems import use_filesystem_options

# Beam modules that define pipeline options but are not imported by ``apache_beam``
# itself. They are read, not imported: some cannot be imported without optional
# dependencies (dask, pandas), and an option class imported in the launcher would also
# put its defaults into the pipeline's options, which workers without that class then
# report as "unparseable".
_OPTION_MODULES = (
    "apache_beam.runners.render",
    "apache_beam.runners.dask.dask_runner",
    "apache_beam.yaml.options",
    "apache_beam.runners.interactive.interactive_runner",
)


def _beam_option_parser() -> Any:
    """Beam's own argument parser with the options of every runner Beam ships: the option
    classes ``apache_beam`` registers, plus the flags of :data:`_OPTION_MODULES` read from
    their source (accepted with or without a value)."""
    import re
    from pathlib import Path

    import apache_beam
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    class _RaisingParser(_BeamArgumentParser):
        def error(self, message: str) -> None:  # argparse would print usage and exit
            raise ValueError(message)

    parser = _RaisingParser(allow_abbrev=False)
    classes: dict[str, type] = {}
    stack = list(PipelineOptions.__subclasses__())
    while stack:
        cls = stack.pop()
        classes.setdefault(f"{cls.__module__}.{cls.__qualname__}", cls)
        stack.extend(cls.__subclasses__())
    for cls in classes.values():
        try:
            cls._add_argparse_args(parser)
        except Exception:  # an option class whose flags clash with another's
            continue
    known = {s for action in parser._actions for s in action.option_strings}
    static_flags: set[str] = set()
    root = Path(apache_beam.__file__).parent
    for name in _OPTION_MODULES:
        src = root.joinpath(*name.split(".")[1:]).with_suffix(".py")
        if src.is_file():
            text = src.read_text(encoding="utf-8")
            static_flags.update(re.findall(r"add_argument\(\s*['\"](--[A-Za-z0-9_]+)", text))
    for flag in sorted(static_flags - known):
        parser.add_argument(flag, nargs="?")
    return parser


def check_beam_args(beam_args: Sequence[str], own_flags: Sequence[str]) -> None:
    """Refuse every argument that is neither the tool's nor a Beam pipeline option.

    Beam's parser only warns about and discards what it does not know, so a typo such as
    ``--export-promts``, a hyphenated Beam flag (``--num-workers``: Beam's are
    ``--num_workers``) or ``--dry-run`` would otherwise turn a dry run into a real, paid
    submission. The check uses Beam's own parser with the option classes of every runner
    Beam ships registered (Dataflow, Flink, Spark, Prism, Dask, portable...). Beam's
    ``--dry_run`` is honoured only by the DataflowRunner, so it is refused elsewhere.

    Raises:
        ConfigError: (exit 2) naming the argument and, where one is close, the flag the
        user probably meant; nothing has been read or run.
    """
    _refuse_secret_flags(beam_args)
    if not beam_args:  # nothing to check: Beam's parser of every runner is not built
        return
    parser = _beam_option_parser()
    try:
        known_args, unknown = parser.parse_known_args(list(beam_args))
    except ValueError as exc:  # e.g. "argument --num_workers: expected one argument"
        raise ConfigError("beam options", f"{exc} (nothing was run)") from None
    if unknown:
        arg = next((a for a in unknown if a.startswith("-")), unknown[0])
        flag = arg.split("=", 1)[0]
        if not flag.startswith("-"):
            raise ConfigError(
                flag, "unexpected argument (every value must follow its flag; nothing was run)"
            )
        beam_flags = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
        if flag in ("--dry-run", "--dryrun"):
            raise _unknown_flag(flag, "; for a dry run use --export-prompts PATH")
        raise _unknown_flag(flag, _did_you_mean(flag, own_flags, beam_flags))
    runner = str(getattr(known_args, "runner", None) or "")
    _check_runner_name(runner)
    if getattr(known_args, "dry_run", False) and "dataflow" not in runner.lower():
        raise ConfigError(
            "--dry_run",
            "Beam's --dry_run is honoured only by the DataflowRunner; for a dry run that "
            "sends nothing use --export-prompts PATH (nothing was run)",
        )


def _spelling(flag: str) -> str:
    """A flag with ``-`` and ``_`` made alike (``--output-path`` ~ ``--output_path``)."""
    return flag.replace("-", "_").replace("__", "--", 1)


def _did_you_mean(flag: str, own: Sequence[str], beam_flags: Sequence[str] = ()) -> str:
    """``"; did you mean --X?"`` for the flag closest to ``flag`` (difflib ratio >= 0.75),
    the tool's own spelt as the tool spells them; ``""`` when none is close."""
    import difflib

    by_spelling = {_spelling(f): f for f in own}
    close = difflib.get_close_matches(
        _spelling(flag), [*by_spelling, *beam_flags], n=1, cutoff=0.75
    )
    return f"; did you mean {by_spelling.get(close[0], close[0])}?" if close else ""


def _unknown_flag(flag: str, hint: str) -> ConfigError:
    return ConfigError(
        flag,
        f"unknown flag{hint} (flags other than the tool's own must be Beam pipeline "
        "options, spelt as Beam spells them; nothing was run)",
    )


def check_own_flag_typos(argv: Sequence[str], own: Sequence[str]) -> None:
    """Refuse, before the parse, a flag that is close to one of the tool's own but is
    not one (``--output-pat``), unless Beam knows it. argparse would otherwise first say
    that the flag it stands for is missing ("the following arguments are required"),
    without the "did you mean" every other typo gets from :func:`check_beam_args`.

    Raises:
        ConfigError: (exit 2) naming the flag and the tool's flag it is close to.
    """
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("--") or flag in own:
            continue
        hint = _did_you_mean(flag, own)
        if hint and not _is_beam_flag(flag):
            raise _unknown_flag(flag, hint)


def _is_beam_flag(flag: str) -> bool:
    parser = _beam_option_parser()
    return any(flag in a.option_strings for a in parser._actions)


def _check_runner_name(runner: str) -> None:
    """Refuse a ``--runner`` that Beam does not know (``DirectRunnr``): Beam would fail
    only when the pipeline runs, and the location checks, which read the runner's name,
    would first complain about local paths. A dotted name is a runner class's module path
    (Beam imports it) and is not checked here.

    Raises:
        ConfigError: on ``--runner``, naming the closest known runner and all of them.
    """
    import difflib

    from apache_beam.options.pipeline_options import StandardOptions

    if not runner or "." in runner:
        return
    known = list(StandardOptions.KNOWN_RUNNER_NAMES)
    lowered = {name.lower(): name for name in known}
    name = runner.lower()
    if name in lowered or name + "runner" in lowered or name == "pythonrpcdirectrunner":
        return
    close = difflib.get_close_matches(name, list(lowered), n=1, cutoff=0.6)
    hint = f"; did you mean {lowered[close[0]]}?" if close else ""
    raise ConfigError(
        "--runner",
        f"unknown runner {runner!r}{hint} (Beam's runners: {', '.join(known)}; nothing was run)",
    )


def own_flags(parser: Any) -> list[str]:
    """Every option string an argparse parser defines."""
    return [s for action in parser._actions for s in action.option_strings]


def beam_options(beam_args: Sequence[str], verbose: bool = False) -> Any:
    """``PipelineOptions`` of the driver's Beam flags, with SDK workers' own logging at
    WARNING unless ``verbose`` or the user chose a level (in multi_processing and portable
    runs, every worker otherwise prints dozens of INFO lines about its own start-up).
    mmirage's own progress lines stay (``sdk_harness_log_level_overrides``).

    The options are also handed to Beam's ``FileSystems`` (:func:`use_filesystem_options`):
    call this before the driver touches its storage, so the launcher's own reads and
    writes use the same ``--s3_endpoint_url`` (or other filesystem options) as the job."""
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(beam_args)
    if not verbose and not any(
        a.split("=", 1)[0]
        in ("--default_sdk_harness_log_level", "--sdk_harness_log_level_overrides")
        for a in args
    ):
        args += [
            # WARN, not WARNING: Python reads either, and Java runners (the Flink job
            # server of Beam 2.62, whose enum has WARN only) parse this option too.
            "--default_sdk_harness_log_level=WARN",
            '--sdk_harness_log_level_overrides={"mmirage_beam": "INFO"}',
        ]
    options = PipelineOptions(args)
    use_filesystem_options(options)
    return options


#: Beam's option classes that configure its filesystems: the ``--s3_*`` flags of
#: ``s3://``, Azure Blob Storage's and HDFS's. The commands that run no pipeline
#: (``check``, ``runs``, ``cancel``) take these flags, and only these, of Beam's options.
FILESYSTEM_OPTION_CLASSES = ("S3Options", "AzureOptions", "HadoopFileSystemOptions")

#: Beam's options that carry a storage secret. They are refused: pipeline options are
#: stored in the job (Dataflow's console, a job service), so a key there is as good as
#: published. The storage clients read their credentials from the environment instead.
SECRET_STORAGE_FLAGS = {
    "--s3_access_key_id": "AWS_ACCESS_KEY_ID",
    "--s3_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "--s3_session_token": "AWS_SESSION_TOKEN",
    "--azure_connection_string": "AZURE_STORAGE_CONNECTION_STRING",
}

FILESYSTEM_FLAGS_HELP = (
    "Beam's filesystem options are accepted as 'mmirage run' takes them, e.g. "
    "--s3_endpoint_url URL --s3_region_name REGION for an S3-compatible server (boto3's "
    "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL and AWS_DEFAULT_REGION work too), "
    "--blob_service_endpoint, --hdfs_host/--hdfs_port/--hdfs_user. Storage credentials "
    "come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, a profile...)."
)


def _refuse_secret_flags(args: Sequence[str]) -> None:
    """Refuse a Beam option that carries a storage secret (:data:`SECRET_STORAGE_FLAGS`).

    Raises:
        ConfigError: naming the flag and the environment variable to use instead.
    """
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in SECRET_STORAGE_FLAGS:
            raise ConfigError(
                flag,
                "a storage secret is never taken as a flag (pipeline options are stored "
                "in the job, where anyone who sees the job reads them); set "
                f"{SECRET_STORAGE_FLAGS[flag]} in the environment of the launcher and of "
                "the workers instead (nothing was run)",
            )


def parse_filesystem_args(parser: Any, argv: Optional[Sequence[str]]) -> tuple[Any, list[str]]:
    """``parser.parse_known_args(argv)`` for a command that runs no pipeline, allowing of
    Beam's options only its filesystem ones (:data:`FILESYSTEM_OPTION_CLASSES`).

    Beam loads only when such a flag is given, so ``--help`` and plain command lines stay
    as fast as before. Hand the returned flags to :func:`filesystem_pipeline_options`.

    Returns:
        ``(args, filesystem_flags)``.

    Raises:
        SystemExit: (status 2, argparse's error) for any other argument, naming it and
            the flags that are accepted.
        ConfigError: a flag carrying a storage secret (:data:`SECRET_STORAGE_FLAGS`), or
            close to one of the command's own (:func:`check_own_flag_typos`).
    """
    check_own_flag_typos(sys.argv[1:] if argv is None else argv, own_flags(parser))
    args, rest = parser.parse_known_args(argv)
    if not rest:
        return args, []
    _refuse_secret_flags(rest)
    from apache_beam.options import pipeline_options

    fs_parser = _parser_of([getattr(pipeline_options, n) for n in FILESYSTEM_OPTION_CLASSES])
    try:
        _, unknown = fs_parser.parse_known_args(list(rest))
    except ValueError as exc:  # "argument --s3_region_name: expected one argument"
        parser.error(str(exc))
    if unknown:
        known = sorted(
            s for a in fs_parser._actions for s in a.option_strings if s not in SECRET_STORAGE_FLAGS
        )
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)} ({parser.prog} runs no pipeline: "
            f"of Beam's options it takes only the filesystem ones: {', '.join(known)})"
        )
    return args, list(rest)


def _parser_of(option_classes: Sequence[type]) -> Any:
    """A parser that raises ``ValueError`` (instead of exiting) with the flags of Beam's
    ``option_classes``."""
    import argparse

    class _Raising(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise ValueError(message)

    parser = _Raising(allow_abbrev=False, add_help=False)
    for cls in option_classes:
        cls._add_argparse_args(parser)
    return parser


def filesystem_pipeline_options(flags: Sequence[str]) -> Any:
    """``PipelineOptions`` of a command's Beam filesystem flags (:func:`parse_filesystem_args`;
    none: Beam's defaults, and boto3's environment such as ``AWS_ENDPOINT_URL_S3``),
    handed to Beam's ``FileSystems`` (:func:`use_filesystem_options`)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(list(flags))
    use_filesystem_options(options)
    return options
