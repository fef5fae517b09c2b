"""YAML loading that remembers where each value came from (file and line).

Validation messages name the file, line, field and value; PyYAML's plain loader forgets
positions, so this records a line per path as it builds the data.

A matrix file is user input that may be hostile or broken, so loading is bounded: the
file's size, its nesting depth (checked on the token stream, before PyYAML's recursive
composer runs) and the number of values after alias expansion (a few nested aliases
otherwise expand to billions). A self-referencing alias is refused. Every failure is a
YamlSyntaxError naming the file and line, never a crash. YAML merge keys
(`<<: *defaults`) are supported: explicit keys win over merged ones.

Two ways to the same result. The fast pass builds the data and the lines in one walk over
libyaml's events (iterative: no recursion to bound) and gives up at anything unusual: an
error of its own, more than MAX_DEPTH open collections, a second document, a merge of
several mappings. The careful path (depth check on the tokens, compose, walk the nodes:
three passes, a third of the speed) then decides, so every message and line is its own.
Two errors of a large file are the fast pass's to report, because the careful path would
report the same: a syntax error (after the same token check) and the value cap (when the
rest of the file is clean); tests/test_hostile_yaml.py holds both paths to agreeing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from imagekit.errors import Problem
from imagekit.paths import MiB, UnsafeFile, read_checked

Path_ = tuple[str | int, ...]

MAX_BYTES = MiB  # a matrix file is a few KB; 1 MiB leaves room and stops a bomb (paths.LIMITS)
MAX_DEPTH = 64
MAX_VALUES = 100_000  # values after alias expansion; a real matrix has hundreds
TOO_MANY = (
    f"more than {MAX_VALUES} values after expanding aliases (an alias bomb?); "
    "a matrix needs far fewer"
)
MERGE_TAG = "tag:yaml.org,2002:merge"
COLLECTIONS = (dict, list, set, tuple)  # what a tag may make of a plain value, refused
STR_TAG = "tag:yaml.org,2002:str"
# libyaml's scanner and composer when PyYAML has them: 10,000 excludes compose in 0.1 s, not
# 4 s (the pure-Python scanner). The depth check runs first, so its recursion is bounded.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class YamlNumber(float):
    """A float as YAML read it, with the text the user wrote ("3.10"), for messages."""

    raw: str

    def __new__(cls, value: float, raw: str) -> YamlNumber:
        number = super().__new__(cls, value)
        number.raw = raw
        return number


@dataclass
class Located:
    """A loaded document plus the 1-based line of every mapping key and sequence item."""

    file: str
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int:
        """Line of the deepest known prefix of `path` (a missing key points at its parent)."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1


class YamlSyntaxError(ValueError):
    def __init__(self, file: str, line: int | None, message: str) -> None:
        self.problem = Problem(message=message, file=file, line=line)
        super().__init__(str(self.problem))


def yaml_reason(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line: its problem, where, and what it was inside (its own text
    spans lines and names a "<unicode string>")."""
    problem = getattr(exc, "problem", None)
    if not problem:
        return " ".join(str(exc).split())
    mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    started = getattr(exc, "context_mark", None)
    inside = f", {context} from line {started.line + 1}" if context and started else ""
    return f"{problem}{where}{inside or (f', {context}' if context else '')}"


def load(path: Path, display: str | None = None) -> Located:
    name = display or str(path)
    text = _read(path, name)
    with paused_gc():
        try:
            return _fast(text, name)
        except _Unusual:
            return _careful(text, name)


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a file's objects are made: a 1 MiB file makes
    ~10^6 containers, and the collector rescanned them again and again as they grew (half
    the load time). What is made here has no cycles and is bounded by the file's caps."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _careful(text: str, name: str) -> Located:
    """The three-pass load: its errors are the ones users see."""
    _check_depth(text, name)
    try:
        node = yaml.compose(text, Loader=LOADER)
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(name, _line(exc), f"not valid YAML: {yaml_reason(exc)}") from None
    except RecursionError:
        raise YamlSyntaxError(name, 1, "nested too deeply to be a matrix file") from None
    located = Located(file=name, data=None)
    walker = _Walker(located)
    located.data = {} if node is None else walker.convert(node, (), ())
    return located


def _read(path: Path, name: str) -> str:
    try:
        data = read_checked(path, "matrix file")
    except UnsafeFile as exc:
        why = str(exc).removeprefix(f"{path}: ")
        raise YamlSyntaxError(name, None, why) from None
    if data is None:
        raise YamlSyntaxError(name, None, "no such file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise YamlSyntaxError(
            name,
            line,
            f"not UTF-8 text (byte {exc.object[exc.start]:#x} at offset "
            f"{exc.start}); save the file as UTF-8",
        ) from None


def _check_depth(text: str, name: str) -> None:
    """Nesting depth from the scanner, which is iterative, before the recursive composer."""
    depth = 0
    try:
        for token in yaml.scan(text, Loader=LOADER):
            if isinstance(token, _OPEN):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlSyntaxError(
                        name,
                        token.start_mark.line + 1,
                        f"nested more than {MAX_DEPTH} levels deep; a matrix file needs a handful",
                    )
            elif isinstance(token, _CLOSE):
                depth -= 1
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(name, _line(exc), f"not valid YAML: {yaml_reason(exc)}") from None


def _line(exc: yaml.YAMLError) -> int:
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark else 1


class _Walker:
    def __init__(self, out: Located) -> None:
        self.out = out
        self.values = 0
        self.constructor = yaml.SafeLoader("")  # one for the file: it caches shared nodes

    def convert(self, node: yaml.Node, path: Path_, active: tuple[int, ...]) -> Any:
        self._count(node)
        if id(node) in active:
            raise self._error(node, "an alias refers to a value that contains it (a cycle)")
        self.out.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, (*active, id(node)))
        if isinstance(node, yaml.SequenceNode):
            inner = (*active, id(node))
            return [self.convert(item, (*path, i), inner) for i, item in enumerate(node.value)]
        return self._scalar(node)

    def _mapping(self, node: yaml.MappingNode, path: Path_, active: tuple[int, ...]) -> dict:  # type: ignore[type-arg]
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                merged.update(self._merge_source(value_node, path, active))
                continue
            key = self._scalar(key_node, as_key=True)
            if key in result:
                raise self._error(key_node, f"duplicate key {key!r}")
            self.out.lines[(*path, key)] = key_node.start_mark.line + 1
            result[key] = self.convert(value_node, (*path, key), active)
        return {**{k: v for k, v in merged.items() if k not in result}, **result}

    def _merge_source(self, node: yaml.Node, path: Path_, active: tuple[int, ...]) -> dict:  # type: ignore[type-arg]
        """`<<: *a` or `<<: [*a, *b]` (earlier mappings win, as in YAML's merge spec)."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: dict[Any, Any] = {}
        for source in reversed(sources):
            value = self.convert(source, path, active)
            if not isinstance(value, dict):
                raise self._error(source, "`<<` merges mappings only (e.g. `<<: *defaults`)")
            merged.update(value)
        return merged

    def _scalar(self, node: yaml.Node, as_key: bool = False) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            what = "a key" if as_key else "this value"
            raise self._error(node, f"{what} must be a plain value")
        try:
            value = self.constructor.construct_object(node)
        # not only YAML's errors: `2001-13-45` is read as a date and `!!float x` as a float,
        # whose constructors raise ValueError (a crash, exit 70, before)
        except (yaml.YAMLError, ValueError, ArithmeticError) as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise self._error(node, f"{problem} (tag {node.tag}); use plain YAML values") from None
        if isinstance(value, COLLECTIONS):  # `!!map x` or `!!set x`: a container from a word
            raise self._error(node, f"tag {node.tag} on a plain value; use plain YAML values")
        if isinstance(value, float) and not isinstance(value, bool):
            return YamlNumber(value, str(node.value))
        return value

    def _count(self, node: yaml.Node) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise self._error(node, TOO_MANY)

    def _error(self, node: yaml.Node, message: str) -> YamlSyntaxError:
        return YamlSyntaxError(self.out.file, node.start_mark.line + 1, f"{message}")


# -- the fast pass: one walk over the events -------------------------------------------------


class _Unusual(Exception):
    """Something the fast pass leaves to the careful path, which has the exact message."""


class _TooMany(Exception):
    """More than MAX_VALUES values, at this line: the careful walk stops at the same value."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


_NO_KEY = object()  # a mapping waiting for its next key
_MERGE = object()  # a mapping whose next value merges into it (`<<: *defaults`)
_ITEM = object()  # a sequence's "key": its next value is an item (a mapping's key may be None)
_NO_DOCUMENT = object()
_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)
_NODE_TYPES = frozenset(_NODE_EVENTS)
_STARTS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_ENDS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
_RESOLVERS = LOADER.yaml_implicit_resolvers  # implicit tags by a plain scalar's first letter
_RESOLVE_ANY = None in _RESOLVERS


class _Frame:
    """An open mapping or sequence: its path and what it holds so far."""

    __slots__ = ("child", "items", "key", "merged", "path")

    def __init__(self, path: Path_, mapping: bool) -> None:
        self.path = path
        self.child: Path_ = path  # the path of the value under the current key
        self.items: Any = {} if mapping else []
        self.key: Any = _NO_KEY if mapping else _ITEM
        self.merged: dict[Any, Any] = {}

    def value(self) -> Any:
        if not self.merged:
            return self.items
        # merged keys first, explicit ones win: the careful walk's order
        return {**{k: v for k, v in self.merged.items() if k not in self.items}, **self.items}


def _fast(text: str, name: str) -> Located:
    parser = LOADER(text)
    builder = _Builder()
    try:
        try:
            data = builder.build(parser.get_event)
        except _TooMany as many:
            builder.drain(parser.get_event)  # the careful path's earlier errors, if any
            raise YamlSyntaxError(name, many.line, TOO_MANY) from None
    except yaml.YAMLError as exc:
        _syntax_error(builder, text, name, exc)
    finally:
        parser.dispose()
    return Located(file=name, data={} if data is _NO_DOCUMENT else data, lines=builder.lines)


def _syntax_error(builder: _Builder, text: str, name: str, exc: yaml.YAMLError) -> NoReturn:
    """libyaml's error, where the careful path reports that one too: after its token check
    (which reports a token error or too deep a nesting first), its composer meets the same
    events and stops at the same error, when no anchor came before (the composer's own
    errors). Otherwise the careful path decides. Either way a 1 MiB file is not composed
    only to fail at its last line."""
    if builder.aliases is not None:
        raise _Unusual from None
    _check_depth(text, name)
    raise YamlSyntaxError(name, _line(exc), f"not valid YAML: {yaml_reason(exc)}") from None


class _Aliases:
    """Events with each alias replaced by the events of its anchor, replayed (the careful
    walk converts an anchored node again at each alias). An undefined, repeated or
    self-containing anchor is unusual. Used from a file's first anchor or alias on."""

    def __init__(self, get_event: Callable[[], Any], first: Any, depth: int) -> None:
        self.get_event = get_event
        self.pending: Any = first
        self.depth = depth  # of the events read from the file (replays not counted)
        self.anchors: dict[str, list[Any]] = {}
        self.recording: list[tuple[str, list[Any], list[int]]] = []  # open: events, depth
        self.replays: list[Iterator[Any]] = []

    def next(self) -> Any:
        while True:
            event = self._raw() if not self.replays else next(self.replays[-1], None)
            if event is None:
                self.replays.pop()
            elif type(event) is yaml.AliasEvent:
                if event.anchor not in self.anchors:  # undefined, or still open: a cycle
                    raise _Unusual
                self.replays.append(iter(self.anchors[event.anchor]))
            else:
                return event

    def names(self) -> set[str]:
        """The anchors defined so far, open ones included."""
        return {*self.anchors, *(name for name, _, _ in self.recording)}

    def _raw(self) -> Any:
        event, self.pending = self.pending, None
        if event is None:
            event = self.get_event()
        self.depth += 1 if isinstance(event, _STARTS) else -1 if isinstance(event, _ENDS) else 0
        if self.recording:
            self._record(event)
        if isinstance(event, _NODE_EVENTS) and event.anchor is not None:
            self._anchor(event)
        return event

    def _anchor(self, event: Any) -> None:
        name = event.anchor
        if name in self.names():
            raise _Unusual  # a repeated anchor: the composer's error
        if isinstance(event, yaml.ScalarEvent):
            self.anchors[name] = [event]
        else:
            self.recording.append((name, [event], [1]))

    def _record(self, event: Any) -> None:
        step = 1 if isinstance(event, _STARTS) else -1 if isinstance(event, _ENDS) else 0
        for _, events, depth in self.recording:
            events.append(event)
            depth[0] += step
        if self.recording[-1][2][0] == 0:  # only the innermost can close on one event
            name, events, _ = self.recording.pop()
            self.anchors[name] = events


class _Builder:
    """The data and the lines from events, as the careful walk makes them from nodes: a
    mapping's keys set their lines (a value's path is its key's), a sequence's items only
    where none is yet, the value count is the walk's (keys and merge lists uncounted)."""

    def __init__(self) -> None:
        self.lines: dict[Path_, int] = {}
        self.values = 0
        self.stack: list[_Frame] = []
        self.top: Any = _NO_DOCUMENT
        self.documents = 0
        self.aliases: _Aliases | None = None
        self.opening = False  # the event being read opens a collection (for drain)
        self.constructor = yaml.SafeLoader("")  # tags other than str, as the walk does
        self.resolver = yaml.resolver.Resolver()
        self.plain_tags: dict[str, str] = {}  # a plain scalar's tag depends on its text only
        # and its value on its tag and text: `true` 3,000 times is constructed once (a
        # scalar's value is immutable: int, float, bool, None, a date, bytes)
        self.scalars: dict[tuple[str, str], Any] = {}

    def build(self, get_event: Callable[[], Any]) -> Any:
        """One loop over the events, scalars inline: it runs ~10^5 times for 1 MiB."""
        next_event, stack = get_event, self.stack
        while True:
            event = next_event()
            kind = type(event)
            if self.aliases is None and (
                kind is yaml.AliasEvent or (kind in _NODE_TYPES and event.anchor is not None)
            ):
                self.aliases = _Aliases(get_event, event, len(stack))
                next_event = self.aliases.next  # the slower reader from here
            elif kind is yaml.ScalarEvent:
                frame = stack[-1] if stack else None
                if frame is None or frame.key is not _NO_KEY:
                    self._place(frame, self._value(event), event)
                else:
                    self._key(frame, event)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                self._open(event, kind is yaml.MappingStartEvent)
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                done = stack.pop()
                self._place(stack[-1] if stack else None, done.value(), None)
            elif kind is yaml.DocumentStartEvent:
                self.documents += 1
                if self.documents > 1:
                    raise _Unusual  # the composer says "expected a single document"
            elif kind is yaml.StreamEndEvent:
                return self.top

    def drain(self, get_event: Callable[[], Any]) -> None:
        """After the value cap: the rest of the file, read for what the careful path would
        report first. Too deep a nesting, a second document, a repeated anchor or an alias
        to none (the composer's errors) is unusual; libyaml's errors are raised."""
        names = self.aliases.names() if self.aliases else set()
        depth = self.aliases.depth if self.aliases else len(self.stack) + self.opening
        while True:
            event = get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent and event.anchor is None:
                continue  # most events: nothing to check
            depth += 1 if kind in _STARTS else -1 if kind in _ENDS else 0
            anchor = getattr(event, "anchor", None)
            if kind is yaml.AliasEvent:
                if anchor not in names:
                    raise _Unusual
            elif anchor is not None:
                if anchor in names:
                    raise _Unusual
                names.add(anchor)
            if depth > MAX_DEPTH or kind is yaml.DocumentStartEvent:
                raise _Unusual
            if kind is yaml.StreamEndEvent:
                return

    def _open(self, event: Any, mapping: bool) -> None:
        frame = self.stack[-1] if self.stack else None
        if frame is not None and (frame.key is _NO_KEY or (frame.key is _MERGE and not mapping)):
            raise _Unusual  # a collection as a key; `<<: [*a, *b]` (merged in reverse)
        if len(self.stack) >= MAX_DEPTH:
            raise _Unusual  # events nest at least as deep as the tokens the check counts
        self.opening = True
        self._count(event)
        self.opening = False
        self.stack.append(_Frame(self._path(frame, event), mapping))

    def _path(self, frame: _Frame | None, event: Any) -> Path_:
        """A value's path, its line recorded where the walk records it."""
        if frame is None:
            self.lines.setdefault((), event.start_mark.line + 1)
            return ()
        if frame.key is _ITEM:
            path = (*frame.path, len(frame.items))
            self.lines.setdefault(path, event.start_mark.line + 1)
            return path
        return frame.child  # its key's path, whose line the key set

    def _place(self, frame: _Frame | None, value: Any, event: Any) -> None:
        """Put a finished value in its mapping or sequence; `event`: a scalar's, whose path
        and line were not recorded yet (a collection's were, when it opened)."""
        if frame is None:
            if event is not None:
                self._path(None, event)
            self.top = value
        elif frame.key is _ITEM:
            if event is not None:
                self._path(frame, event)
            frame.items.append(value)
        elif frame.key is _MERGE:
            if type(value) is not dict:
                raise _Unusual  # `<<` merges mappings only
            frame.merged.update(value)
            frame.key = _NO_KEY
        else:
            frame.items[frame.key] = value
            frame.key = _NO_KEY

    def _key(self, frame: _Frame, event: Any) -> None:
        tag = self._tag(event)
        if tag == MERGE_TAG:
            frame.key, frame.child = _MERGE, frame.path  # merged keys are the mapping's own
            return
        key = self._construct(event, tag)
        if key in frame.items:
            raise _Unusual  # a duplicate key
        frame.key = key
        frame.child = (*frame.path, key)
        self.lines[frame.child] = event.start_mark.line + 1

    def _count(self, event: Any) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise _TooMany(event.start_mark.line + 1)

    def _value(self, event: Any) -> Any:
        self._count(event)
        if event.tag is None and not event.implicit[0]:
            return event.value  # quoted, untagged: a str
        return self._construct(event, self._tag(event))

    def _tag(self, event: Any) -> str:
        """The composer's tag: explicit, or resolved from a plain scalar's text."""
        tag = event.tag
        if tag is not None and tag != "!":
            return tag  # type: ignore[no-any-return]
        if not event.implicit[0]:
            return STR_TAG
        value = event.value
        if value not in self.plain_tags:
            resolved = STR_TAG  # no implicit resolver starts with this letter
            if _RESOLVE_ANY or value[:1] in _RESOLVERS:
                resolved = self.resolver.resolve(yaml.ScalarNode, value, event.implicit)
            self.plain_tags[value] = resolved
        return self.plain_tags[value]

    def _construct(self, event: Any, tag: str) -> Any:
        if tag == STR_TAG:
            return event.value  # what the str constructor returns, without a node
        key = (tag, event.value)
        if key not in self.scalars:
            node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
            try:
                value = self.constructor.construct_object(node)
            except Exception:  # whatever it is, the careful walk reports it
                raise _Unusual from None
            if isinstance(value, COLLECTIONS):  # `!!map x`: the careful walk refuses it
                raise _Unusual
            if isinstance(value, float) and not isinstance(value, bool):
                value = YamlNumber(value, str(node.value))
            self.scalars[key] = value
        return self.scalars[key]
