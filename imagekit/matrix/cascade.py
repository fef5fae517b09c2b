"""The options cascade: layers of options merged field by field, lists as `inherit` says."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from typing import Any, get_args

from pydantic import BaseModel

from imagekit.matrix.envfile import InheritField, Options


def merge(base: Options, top: Options) -> Options:
    """`top` wins field by field; `env` maps merge; a list replaces the one below unless
    `top.inherit` says append or prepend. `inherit` itself applies to its own layer only."""
    return merge_all([layer_of(base), layer_of(top)])


OPTION_FIELDS = tuple(Options.model_fields)
_LIST_FIELDS = frozenset(get_args(InheritField))  # the lists `inherit` may append to


def layer_of(model: BaseModel) -> dict[str, Any]:
    """A model's options that are set, as `model_dump(exclude_none=True)` has them but not
    copied (merge_all copies what it returns)."""
    return {k: v for k in OPTION_FIELDS if (v := getattr(model, k, None)) is not None}


def merge_all(layers: Iterable[dict[str, Any]]) -> Options:
    """`merge` of each layer onto the ones below, in one pass: the same result, in time
    linear in the layers' size (merging 10,000 overrides one at a time copied and
    revalidated the growing lists 10,000 times)."""
    fold = _Fold()
    for layer in layers:
        fold.add(layer)
    return fold.result()


class _Fold:
    """Options merged so far. A list field is kept as the chunks it was made of and joined
    once: `dict.fromkeys` over all of them equals deduplicating at each append, because
    it keeps first occurrences. A list only replaced (never appended to) is not
    deduplicated, as `merge` leaves it."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.chunks: dict[str, deque[list[Any]]] = {}
        self.joined: set[str] = set()  # lists appended or prepended to: deduplicated
        self.filled: set[str] = set()  # lists not empty (`merge`'s "and below")

    def add(self, layer: dict[str, Any]) -> None:
        rules = layer.get("inherit") or {}
        for key, value in layer.items():
            if key == "inherit":
                continue  # applies to its own layer only
            if key == "env":
                self.values.setdefault("env", {}).update(value)
            elif key in _LIST_FIELDS:
                self._list(key, value, rules.get(key))
            else:
                self.values[key] = value

    def _list(self, key: str, value: list[Any], rule: str | None) -> None:
        if rule in ("append", "prepend") and key in self.filled:
            chunks = self.chunks[key]
            chunks.append(value) if rule == "append" else chunks.appendleft(value)
            self.joined.add(key)
            return
        self.chunks[key] = deque([value])
        self.joined.discard(key)
        if value:
            self.filled.add(key)
        else:
            self.filled.discard(key)

    def result(self) -> Options:
        values = {k: dict(v) if k == "env" else v for k, v in self.values.items()}
        for key, chunks in self.chunks.items():
            if key in self.joined:
                values[key] = list(dict.fromkeys(itertools.chain.from_iterable(chunks)))
            else:
                values[key] = list(chunks[0])
        # every value was validated when its layer was; validating again is what made a
        # 10,000-entry pip list cost seconds
        return Options.model_construct(**{k: values[k] for k in OPTION_FIELDS if k in values})
