"""fast_init: the same construction as the dataclass's own __init__, for less."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import InitVar, dataclass, field

import pytest

from actors.effects import Send
from messages.coins import Coin
from messages.fast_init import fast_init
from messages.scheduler import TenantChecked


@dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: str
    c: tuple = ()
    d: list = field(default_factory=list)
    e: int = field(default=3, kw_only=True)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a must not be negative")


_Fast = fast_init(dataclasses.make_dataclass(
    "_Fast", [("a", int), ("b", str), ("c", tuple, field(default=())), ("d", list, field(default_factory=list)),
              ("e", int, field(default=3, kw_only=True))],
    frozen=True, slots=True, namespace={"__post_init__": _Plain.__post_init__},
))


@pytest.mark.parametrize("args, kwargs", [
    ((1, "x"), {}),
    ((1, "x", (2,)), {}),
    ((1,), {"b": "y", "d": [4], "e": 9}),
])
def test_the_same_objects_as_the_dataclass_init(args, kwargs):
    slow, fast = _Plain(*args, **kwargs), _Fast(*args, **kwargs)
    assert dataclasses.astuple(slow) == dataclasses.astuple(fast)


def test_the_same_signature_defaults_and_errors():
    def shape(cls):
        return [(p.name, p.kind, repr(p.default)) for p in inspect.signature(cls).parameters.values()]

    assert shape(_Fast) == shape(_Plain)
    assert "d: list = <factory>" in str(inspect.signature(_Fast))
    assert _Fast(1, "x").d is not _Fast(1, "x").d  # a factory runs per object
    with pytest.raises(ValueError, match="negative"):
        _Fast(-1, "x")  # __post_init__ still runs
    with pytest.raises(TypeError):
        _Fast(1, "x", (), [], 5)  # e is keyword-only
    with pytest.raises(TypeError):
        _Fast(1)  # b is required
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Fast(1, "x").a = 2  # still frozen


def test_effects_use_it_and_messages_are_built_by_msgspec():
    assert Send.__init__.__code__.co_filename == "<string>"
    assert Send.__init__.__qualname__ == "Send.__init__"
    for cls in (TenantChecked, Coin):  # msgspec Structs: built in C, not by a generated __init__
        assert not hasattr(cls.__init__, "__code__")
    with pytest.raises(ValueError, match="invalid denom"):
        Coin("", 1)


def test_classes_it_cannot_reproduce_keep_their_own():
    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        a: int
        scale: InitVar[int] = 1

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclass(frozen=True, slots=True)
    class OwnInit:
        a: int

        def __init__(self, a: int) -> None:  # a hand-written one may do more than set fields
            object.__setattr__(self, "a", a * 2)

    assert fast_init(OwnInit)(2).a == 4
    for cls in (WithInitVar, NoSlots, NotFrozen, OwnInit):
        own = cls.__init__
        assert fast_init(cls).__init__ is own
