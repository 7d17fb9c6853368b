"""The README and the pages under docs/: every relative link and anchor resolves, and every
`mmirage ...` command line in a code block parses with the current CLI (flags only:
nothing is read or run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    found, fence = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fence = not fence
        elif not fence and (m := re.match(r"^#{1,6} (.*)$", line)):
            found.add(_slug(m.group(1)))
    return found


def _prose(page: Path) -> list[tuple[int, str]]:
    out, fence = [], False
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fence = not fence
        elif not fence:
            out.append((n, line))
    return out


def _code_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, command) for each shell line in a fenced block; continuations joined."""
    out, fence, pending, start = [], False, "", 0
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fence = not fence
            continue
        if not fence:
            continue
        if not pending:
            start = n
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append((start, pending))
            pending = ""
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for n, line in _prose(page):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}:{n}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}:{n}: {target} (no such heading)")
    assert broken == []


def _mmirage_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for n, whole in _code_lines(page):
            for line in re.split(r"&&|;|\|", whole.split(" #", 1)[0]):
                if not re.match(r"^\s*([A-Z_][A-Z0-9_]*=\S*\s+)*mmirage\s", line):
                    continue
                text = line.split(" #", 1)[0].strip().rstrip("&").strip()
                words = shlex.split(text)
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value mmirage
                    words.pop(0)
                if words[:1] == ["mmirage"]:
                    found.append((f"{page.relative_to(REPO).as_posix()}:{n}", words[1:]))
    return found


COMMANDS = _mmirage_commands()


def test_the_pages_hold_the_commands_a_reader_types():
    used = {argv[0] for _where, argv in COMMANDS if argv}
    assert {"run", "check", "merge", "resubmit", "demo", "fake-provider"} <= used


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_mmirage_command_line_parses(where, argv):
    from mmirage_beam.engines.flink import runner_flags
    from mmirage_beam.launch.flags import check_beam_args
    from mmirage_beam.testing.fake_provider.command import _parser as fake_parser
    from pipelines import cancel, check, merge, resubmit, runs, submit, ui
    from pipelines.cluster import _parser as cluster_parser
    from pipelines.demo import parser as demo_parser

    # $FLAGS: what `mmirage cluster up` prints last, which must parse as Beam's flags.
    flags = runner_flags(8099, Path("/tmp/flink/sdk-boot.sh"), 2)
    argv = [w for word in argv for w in (flags if word == "$FLAGS" else [word])]
    command, rest = argv[0], argv[1:]
    own = {
        "run": submit.parse_args,
        "merge": merge.parse_args,
        "resubmit": resubmit.parse_args,
    }
    if command in own:
        args, beam_args = own[command](rest)
        check_beam_args(beam_args, args.own_flags)
    elif command in ("check", "cancel", "runs", "ui"):
        {"check": check, "cancel": cancel, "runs": runs, "ui": ui}[command].parse_args(rest)
    elif command == "demo":
        demo_parser().parse_args(rest)
    elif command == "fake-provider":
        fake_parser().parse_args(rest)
    elif command == "cluster":
        cluster_parser().parse_args(rest)
    else:
        pytest.fail(f"{where}: unknown command {command!r}")


def test_check_needs_a_config_or_receipts(capsys):
    from pipelines import check

    with pytest.raises(SystemExit) as exc:
        check.parse_args(["--watch"])
    assert exc.value.code == 2
    assert "--config or --metadata-path" in capsys.readouterr().err
