"""The one reader and writer of the contract's typed JSON records (the host snapshot, the
multi-node report): frozen dataclasses whose field types say what each key may hold.

`read(cls, data, where)` builds a record from parsed JSON (`where`: the path to it, "" at
the top) and refuses what does not fit with a
RecordError naming the key path, the value and what fits (`gpus[0].h2d_gbps: 'fast' is not a
number`); `write(record)` gives the JSON back. A field whose default is NOT_READ may be absent
from the JSON: the record then holds NOT_READ (falsy, and unequal to None) and the JSON stays
without the key, so "not read" (older files) and null stay apart and a file round-trips.
Keys a record does not name are kept as they are in its `extra`, and written back. A field
whose JSON key is not its name (a Python keyword) says so in its metadata ("key").
Standard library only (it runs in the image).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from imagekit.contract.checks import RecordError

R = TypeVar("R")
EXTRA = "extra"  # the field of every record that keeps the keys it does not name


class NotRead:
    """The value of a key the JSON left out: never written back, and false."""

    _one: NotRead | None = None

    def __new__(cls) -> NotRead:
        if cls._one is None:
            cls._one = super().__new__(cls)
        return cls._one

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "NOT_READ"

    def __reduce__(self) -> str:
        return "NOT_READ"  # pickled by name: one NOT_READ in every process


NOT_READ = NotRead()


def given(value: object) -> bool:
    """Whether a key was in the JSON at all (null included)."""
    return value is not NOT_READ


def or_none(value: R | NotRead) -> R | None:
    """The value, None where the key was absent: how `.get(key)` read a dict."""
    return None if value is NOT_READ else value  # type: ignore[return-value]


def or_default(value: R | NotRead, default: R) -> R:
    """The value, `default` where the key was absent: how `.get(key, default)` read a dict."""
    return default if value is NOT_READ else value  # type: ignore[return-value]


def key_of(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("key", f.name))


def keys(cls: type) -> list[str]:
    """The JSON keys a record names, in its order (not `extra`)."""
    return [key_of(f) for f in dataclasses.fields(cls) if f.name != EXTRA]


def read(cls: type[R], data: object, where: str) -> R:
    """The record `cls` from JSON `data`; `where` is the key path, for the error."""
    if not isinstance(data, Mapping):
        shown = f"{where}: " if where else ""
        raise RecordError(f"{shown}{_shown(data)} is not an object ({cls.__name__})")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    named = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == EXTRA:
            continue
        key = key_of(f)
        named.add(key)
        path = f"{where}.{key}" if where else key
        if key in data:
            values[f.name] = _value(hints[f.name], data[key], path)
        elif f.default is NOT_READ:
            values[f.name] = NOT_READ
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"{path}: missing; every {cls.__name__} has it")
    extra = {k: v for k, v in data.items() if k not in named}
    if extra:
        values[EXTRA] = extra
    return cls(**values)


def write(record: object) -> dict[str, Any]:
    """The JSON of a record: every field but those NOT_READ, then its `extra` keys."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        if f.name != EXTRA and value is not NOT_READ:
            out[key_of(f)] = _json(value)
    out.update(getattr(record, EXTRA, None) or {})
    return out


def _json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_json() if hasattr(value, "to_json") else write(value)
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value.value if hasattr(value, "value") and not isinstance(value, str) else value


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # each class in the MRO read in its own module


def _value(kind: Any, value: object, where: str) -> Any:
    """`value` as `kind` says (a scalar, a list, a dict of str, a record, a union of them)."""
    origin = typing.get_origin(kind)
    if kind is Any or kind is object:
        return value
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(kind), value, where)
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{where}: {_shown(value)} is not a list")
        (item,) = typing.get_args(kind)
        return [_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise RecordError(f"{where}: {_shown(value)} is not an object")
        item = typing.get_args(kind)[1]
        return {str(k): _value(item, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(kind):
        reader = getattr(kind, "from_json", None)
        return reader(value, where) if reader else read(kind, value, where)
    if _fits(kind, value):
        return value
    raise RecordError(f"{where}: {_shown(value)} is not {_describe(kind)}")


def _union(kinds: tuple[Any, ...], value: object, where: str) -> Any:
    if value is None and type(None) in kinds:
        return None
    options = [k for k in kinds if k is not type(None)]
    for kind in options:
        try:
            return _value(kind, value, where)
        except RecordError as exc:
            if not str(exc).startswith(f"{where}: "):
                raise  # inside a list or a record: its own error names the key within
    wanted = " or ".join(_describe(k) for k in kinds)
    raise RecordError(f"{where}: {_shown(value)} is not {wanted}")


def _fits(kind: Any, value: object) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    raise TypeError(f"records cannot read {kind!r}")  # a record declared with a wrong type


NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _describe(kind: Any) -> str:
    if kind is type(None):
        return "null"
    origin = typing.get_origin(kind)
    if origin is list:
        return "a list"
    if origin is dict or dataclasses.is_dataclass(kind):
        return "an object"
    return NAMES.get(kind, str(kind))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Record:
    """What every record shares: read from JSON (`WHERE` names it in a refusal when no key
    path is given) and written back."""

    WHERE: ClassVar[str] = ""

    @classmethod
    def from_json(cls, data: object, where: str = "") -> Any:
        return read(cls, data, where or cls.WHERE)

    def to_json(self) -> dict[str, Any]:
        return write(self)
