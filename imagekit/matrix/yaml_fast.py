"""The fast pass of loading a matrix file: its data and lines in one walk over libyaml's events.

It gives up (Unusual) at anything the careful path in yamlsrc.py must decide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import yaml

from imagekit.matrix.yaml_located import (
    COLLECTIONS,
    LOADER,
    MAX_DEPTH,
    MAX_VALUES,
    MERGE_TAG,
    STR_TAG,
    TOO_MANY,
    Located,
    Path_,
    YamlNumber,
    YamlSyntaxError,
    check_depth,
    not_valid,
)


class Unusual(Exception):
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


def fast(text: str, name: str) -> Located:
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
        raise Unusual from None
    check_depth(text, name)
    raise not_valid(name, exc) from None


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
                    raise Unusual
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
            raise Unusual  # a repeated anchor: the composer's error
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
                    raise Unusual  # the composer says "expected a single document"
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
                    raise Unusual
            elif anchor is not None:
                if anchor in names:
                    raise Unusual
                names.add(anchor)
            if depth > MAX_DEPTH or kind is yaml.DocumentStartEvent:
                raise Unusual
            if kind is yaml.StreamEndEvent:
                return

    def _open(self, event: Any, mapping: bool) -> None:
        frame = self.stack[-1] if self.stack else None
        if frame is not None and (frame.key is _NO_KEY or (frame.key is _MERGE and not mapping)):
            raise Unusual  # a collection as a key; `<<: [*a, *b]` (merged in reverse)
        if len(self.stack) >= MAX_DEPTH:
            raise Unusual  # events nest at least as deep as the tokens the check counts
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
                raise Unusual  # `<<` merges mappings only
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
            raise Unusual  # a duplicate key
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
                raise Unusual from None
            if isinstance(value, COLLECTIONS):  # `!!map x`: the careful walk refuses it
                raise Unusual
            if isinstance(value, float) and not isinstance(value, bool):
                value = YamlNumber(value, str(node.value))
            self.scalars[key] = value
        return self.scalars[key]
