"""Jinja2 rendering shared by prompts (submit) and the top-level ``output_schema``.

Templates use ``StrictUndefined``: a variable missing from the row is an error naming
the variable, never an empty string. In ``output_schema``, a string that is exactly one
expression (``"{{ answer }}"``, ``"{{ answer.question }}"``) keeps the value's type (a
number stays a number, a parsed JSON object stays an object); anything else renders to a
string. Nested dicts and lists are rendered leaf by leaf. A bare lookup
(``{{ name }}``, ``{{ name.field }}``, ``{{ name.field.sub }}``) is resolved without
Jinja, with Jinja's results and errors (:class:`SchemaRenderer`; proved against Jinja on
every shipped and test config by tests/unit/test_render_lookup.py): about 15x cheaper per row.
A prompt that is plain substitution (literal text and bare lookups) is filled the same way
(:class:`PromptTemplate`; proved by tests/unit/test_render_prompt.py).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence, Union

import jinja2

__all__ = [
    "MissingValue",
    "MISSING",
    "NullValueError",
    "holds_null",
    "make_environment",
    "PromptTemplate",
    "SchemaRenderer",
    "template_variables",
    "parallel_list_inputs",
    "misaligned_lists",
]


class MissingValue:
    """An output without a usable value (failed, pending): any attribute or item of it is
    itself, it renders as an empty string, and a bare ``{{ expr }}`` yielding it becomes
    ``None`` (JSON ``null``)."""

    def __getattr__(self, name: str) -> MissingValue:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, key: object) -> MissingValue:
        return self

    def __str__(self) -> str:
        return ""

    def __bool__(self) -> bool:
        return False

    def __iter__(self):  # noqa: ANN204
        return iter(())

    def __repr__(self) -> str:
        return "MissingValue()"


MISSING = MissingValue()

#: a variable the row's context does not hold (looked up as Jinja does then)
_ABSENT = object()

_BARE_EXPR = re.compile(r"^\s*\{\{\s*(.+?)\s*\}\}\s*$", re.S)
# A bare expression that is a plain lookup: ``name``, ``name.field``, ``name.field.sub``
# (ASCII identifiers). Resolved without Jinja (:meth:`SchemaRenderer._lookup`).
_LOOKUP_EXPR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2}\Z")
# Names Jinja's parser or compiler reads as something other than a variable (constants,
# operators, keywords, the names it binds itself): expressions using them stay with Jinja.
_JINJA_WORDS = frozenset(
    "true false none True False None not and or in is if else recursive with without "
    "context ignore missing self super loop caller varargs kwargs".split()
)


class NullValueError(jinja2.TemplateRuntimeError):
    """A prompt's ``{{ expr }}`` produced ``None`` (JSON null), or a list or mapping
    holding one, which would otherwise render as the text ``None``."""


def _reject_null(value: Any) -> Any:
    """Jinja2 ``finalize`` hook of prompt templates: applied to the value of every
    ``{{ expr }}`` (never to ``{% if %}`` tests or filter arguments), so
    ``{% if x %}``, ``{{ x or "" }}`` and ``{{ x | default("n/a", true) }}`` still work."""
    if value is None or (isinstance(value, (list, tuple, dict)) and holds_null(value)):
        raise NullValueError(
            "null value" if value is None else f"a value holding null ({value!r:.80})"
        )
    return value


def holds_null(value: Any) -> bool:
    """True for ``None`` and for a list, tuple or dict holding ``None`` at any depth."""
    if value is None:
        return True
    if isinstance(value, dict):
        return any(holds_null(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_null(v) for v in value)
    return False


def make_environment(reject_null: bool = False) -> jinja2.Environment:
    """The environment every mmirage template is compiled in (strict, no autoescape).

    Args:
        reject_null: prompt templates: a ``{{ expr }}`` whose value is ``None`` (or a
            list/mapping holding ``None``) raises :class:`NullValueError` instead of
            rendering the text ``None``. The top-level ``output_schema`` keeps the
            default (its failed outputs are :data:`MISSING`, rendered empty).
    """
    return jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        finalize=_reject_null if reject_null else None,
    )


def jinja_lookup(
    env: jinja2.Environment,
    globals_: dict[str, Any],
    variables: dict[str, Any],
    name: str,
    fields: Sequence[str],
) -> Any:
    """The value of ``{{ name.f.g }}`` as Jinja's compiled code resolves it: ``variables``
    (the render's context), then the environment's ``globals_``, then its undefined
    (StrictUndefined raises on use); each field through ``Environment.getattr``.
    Shared by :class:`PromptTemplate` and :class:`SchemaRenderer`'s bare lookups."""
    if name in variables:
        value = variables[name]
    elif name in globals_:
        value = globals_[name]
    else:
        value = env.undefined(name=name)
    for field in fields:
        value = env.getattr(value, field)
    return value


class PromptTemplate:
    """A prompt template compiled once; :meth:`render` fills it for one row (a ``str``).

    A template that is plain substitution, literal text and bare lookups (``{{ name }}``,
    ``{{ name.field }}``, ``{{ name.field.sub }}``) with no filter, test, expression,
    block, comment or whitespace-control marker, is split once here into Jinja's own
    parse of it (the literal text as Jinja's lexer leaves it: newlines normalised, one
    trailing newline dropped) and rendered by joining the literals with each lookup's
    value as Jinja's compiled template converts it: the name from the row's variables,
    else the environment's globals, else the environment's undefined; each ``.field``
    by ``Environment.getattr``; then ``str(environment.finalize(value))``. So the text
    and the errors (types and messages) are Jinja's own. Every other template is
    rendered by Jinja.

    Args:
        source: the template text (``outputs[].prompt``).
        env: the environment (:func:`make_environment`; prompts use
            ``reject_null=True``); a new default one when None.
        substitution_fast_path: render plain substitution without Jinja (default).
            False always renders with Jinja: the reference the fast path is tested
            against (tests/unit/test_render_prompt.py).

    Raises:
        jinja2.TemplateSyntaxError: from the constructor, for a template Jinja cannot
            parse. From :meth:`render`: ``jinja2.UndefinedError`` (a variable the row
            does not have), :class:`NullValueError` (a ``None`` value with
            ``reject_null``), and whatever converting a value to ``str`` raises.
    """

    def __init__(
        self,
        source: str,
        env: Optional[jinja2.Environment] = None,
        substitution_fast_path: bool = True,
    ) -> None:
        self._env = env if env is not None else make_environment()
        self._parts = _substitution_parts(self._env, source) if substitution_fast_path else None
        # Jinja compiles what the fast path does not take (and raises its syntax errors).
        self._template = self._env.from_string(source) if self._parts is None else None
        self._globals = self._env.make_globals(None)  # what a template's context falls back on
        self._finalize = self._env.finalize

    @property
    def substitution(self) -> bool:
        """True when the template is rendered without Jinja (plain substitution)."""
        return self._parts is not None

    def render(self, variables: dict[str, Any]) -> str:
        """The template filled with ``variables`` (one row's inputs, by name)."""
        if self._parts is None:
            return self._template.render(**variables)
        env = self._env
        globals_ = self._globals
        finalize = self._finalize
        out = []
        for part in self._parts:
            if part.__class__ is str:
                out.append(part)
                continue
            name, fields = part
            if not fields:
                # a str variable renders as itself (finalize and str() keep a str as is)
                value = variables.get(name, _ABSENT)
                if value.__class__ is str:
                    out.append(value)
                    continue
            value = jinja_lookup(env, globals_, variables, name, fields)
            out.append(str(finalize(value) if finalize is not None else value))
        return "".join(out)


def _substitution_parts(
    env: jinja2.Environment, source: str
) -> Optional[list[Union[str, tuple[str, tuple[str, ...]]]]]:
    """``source`` as literal strings and ``(name, fields)`` lookups, from Jinja's own parse,
    or None when it is anything more than plain substitution (or does not parse)."""
    if (
        env.line_statement_prefix
        or env.line_comment_prefix
        or env.trim_blocks
        or env.lstrip_blocks
        or env.autoescape
        or any(m in source for m in ("{%", "{#", "{{-", "-}}", "{{+", "+}}"))
    ):
        return None
    from jinja2 import nodes

    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError:
        return None
    if not tree.body:
        return []
    if len(tree.body) != 1 or not isinstance(tree.body[0], nodes.Output):
        return None
    parts: list[Union[str, tuple[str, tuple[str, ...]]]] = []
    for node in tree.body[0].nodes:
        if type(node) is nodes.TemplateData:
            parts.append(str(node.data))
            continue
        fields: list[str] = []
        while type(node) is nodes.Getattr and node.ctx == "load":
            fields.append(node.attr)
            node = node.node
        if type(node) is not nodes.Name or node.ctx != "load":
            return None
        fields.reverse()
        dotted = ".".join([node.name, *fields])
        if not _LOOKUP_EXPR.match(dotted) or any(w in _JINJA_WORDS for w in (node.name, *fields)):
            return None
        parts.append((node.name, tuple(fields)))
    return parts


class SchemaRenderer:
    """Compiles an ``output_schema`` tree once; :meth:`render` fills it for one row.

    A bare lookup (``"{{ name }}"``, ``"{{ name.field }}"``, ``"{{ name.field.sub }}"``)
    is resolved without Jinja, exactly as Jinja's compiled expression would resolve it:
    the name from the row's variables, else the environment's globals, else
    ``StrictUndefined``; each ``.field`` by ``Environment.getattr`` (the attribute first,
    then the item, else undefined), so the values and the errors (their types and
    messages) are Jinja's own. Every other string with ``{{`` or ``{%`` is a Jinja
    template (or expression).

    Args:
        schema: the ``processing_params.output_schema`` tree (dict/list/str/scalars).
        lookup_fast_path: resolve bare lookups without Jinja (default). False compiles
            every bare expression with Jinja: the reference the fast path is tested
            against (tests/unit/test_render_lookup.py).

    Raises (from :meth:`render`):
        jinja2.UndefinedError: a template uses a variable the row does not have.
    """

    def __init__(self, schema: Any, lookup_fast_path: bool = True) -> None:
        self._env = make_environment()
        self._fast = bool(lookup_fast_path)
        self._compiled = self._compile(schema)

    def _compile(self, node: Any) -> Callable[[dict[str, Any]], Any]:
        if isinstance(node, dict):
            items = [(k, self._compile(v)) for k, v in node.items()]
            return lambda ctx: {k: f(ctx) for k, f in items}
        if isinstance(node, list):
            parts = [self._compile(v) for v in node]
            return lambda ctx: [f(ctx) for f in parts]
        if isinstance(node, str):
            m = _BARE_EXPR.match(node)
            if m and "{{" not in m.group(1) and "{%" not in node:
                source = m.group(1)
                lookup = self._lookup(source) if self._fast else None
                if lookup is not None:
                    return lookup
                expr = self._env.compile_expression(source, undefined_to_none=False)

                def bare(ctx: dict[str, Any], expr: Any = expr) -> Any:
                    return _bare_value(expr(**ctx))

                return bare
            if "{{" in node or "{%" in node:
                tmpl = self._env.from_string(node)
                return lambda ctx: tmpl.render(**ctx)
        return lambda ctx: node

    def _lookup(self, source: str) -> Optional[Callable[[dict[str, Any]], Any]]:
        """The resolver of a bare lookup ``source``, or None when it is not one."""
        if not _LOOKUP_EXPR.match(source):
            return None
        name, *fields = source.split(".")
        if name in _JINJA_WORDS or any(f in _JINJA_WORDS for f in fields):
            return None
        env = self._env
        globals_ = env.globals  # what a compiled expression's context falls back on

        def resolve(ctx: dict[str, Any]) -> Any:
            return _bare_value(jinja_lookup(env, globals_, ctx, name, fields))

        if fields:
            return resolve

        def resolve_name(ctx: dict[str, Any]) -> Any:
            value = ctx.get(name, _ABSENT)
            if value.__class__ is str:  # neither undefined nor missing: kept as it is
                return value
            return resolve(ctx)

        return resolve_name

    def render(self, variables: dict[str, Any]) -> Any:
        """Render the schema with ``variables`` (inputs and outputs of one row)."""
        return self._compiled(variables)


def _bare_value(value: Any) -> Any:
    """A bare expression's value as ``output_schema`` keeps it: an undefined value
    raises (``jinja2.UndefinedError`` naming it), :class:`MissingValue` becomes None."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # raises UndefinedError naming the variable
    if isinstance(value, MissingValue):
        return None
    return value


# -- what a prompt template reads (checked per row by BuildRequests) ---------------


def template_variables(source: str) -> frozenset[str]:
    """The top-level variables a Jinja2 template reads (e.g. ``{"question"}``)."""
    from jinja2 import meta  # jinja2.meta is a submodule jinja2 does not import itself

    return frozenset(meta.find_undeclared_variables(jinja2.Environment().parse(source)))


def parallel_list_inputs(source: str) -> tuple[frozenset[str], ...]:
    """Groups of variables a template walks in step, as parallel lists.

    A group is every variable that one ``{% for %}`` loop iterates over or indexes with
    the loop's position: ``{% for q in questions %}{{ answers[loop.index0] }}`` gives
    ``{questions, answers}``; ``{% for i in range(n) %}{{ a[i] }} {{ b[i] }}`` gives
    ``{a, b}``. Only groups of two or more are returned. A row whose lists of one group
    have different lengths is invalid (a JMESPath projection such as ``items[*].x``
    drops nulls, so the lists no longer line up).
    """
    from jinja2 import nodes

    def is_position(node: Any, counters: set[str]) -> bool:
        for n in [node, *node.find_all((nodes.Name, nodes.Getattr))]:
            if isinstance(n, nodes.Name) and n.name in counters:
                return True
            if (
                isinstance(n, nodes.Getattr)
                and isinstance(n.node, nodes.Name)
                and n.node.name == "loop"
                and n.attr in ("index0", "index", "revindex0", "revindex")
            ):
                return True
        return False

    groups: list[frozenset[str]] = []
    for loop in jinja2.Environment().parse(source).find_all(nodes.For):
        group: set[str] = set()
        counters: set[str] = set()
        it = loop.iter
        while isinstance(it, nodes.Filter) and it.node is not None:
            it = it.node
        if isinstance(it, nodes.Name):
            group.add(it.name)
        elif (
            isinstance(it, nodes.Call)
            and isinstance(it.node, nodes.Name)
            and it.node.name == "range"
            and isinstance(loop.target, nodes.Name)
        ):
            counters.add(loop.target.name)
        for body_node in loop.body:
            for item in [body_node, *body_node.find_all(nodes.Getitem)]:
                if (
                    isinstance(item, nodes.Getitem)
                    and isinstance(item.node, nodes.Name)
                    and is_position(item.arg, counters)
                ):
                    group.add(item.node.name)
        if len(group) >= 2:
            groups.append(frozenset(group))
    return tuple(groups)


def misaligned_lists(
    groups: Sequence[frozenset[str]], values: dict[str, Any]
) -> Optional[tuple[str, str]]:
    """``(input names, reason)`` for the first group of :func:`parallel_list_inputs`
    whose list values differ in length, else None."""
    for group in groups:
        lists = {n: values[n] for n in sorted(group) if isinstance(values.get(n), list)}
        if len({len(v) for v in lists.values()}) > 1:
            sizes = ", ".join(f"{n!r} has {len(v)}" for n, v in lists.items())
            return (
                ", ".join(lists),
                f"walks inputs {', '.join(map(repr, lists))} in step as parallel lists, but "
                f"they have different lengths ({sizes} items); a JMESPath projection like "
                "items[*].field drops nulls: use map(&field, items) to keep them "
                "(see docs/config.md, 'Parallel lists')",
            )
    return None
