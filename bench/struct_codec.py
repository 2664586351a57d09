"""The codec of capture formats 1-3 against msgspec Structs, on real records: what issue 16's switch bought.

Run from the repository root:  python bench/struct_codec.py  (about half a minute)

Written before the messages became ``msgspec.Struct`` types, to measure what
the switch would buy: capture's codec of then (``capture.wire``, formats 1-3,
which the reader keeps for those files) built or walked every message object
in Python, one call per message. The messages are Structs now (array-like,
frozen, tagged by message name), and capture formats 4 and 5 are msgspec's
(``capture.typed``). The mirrors here are still generated from the
registered message types (same fields, same defaults) and filled from the
records of a real capture, the one ``bench/replay_speed.py`` makes, so the
comparison reads as it did: the old codec against msgspec's C code encoding
and decoding the same messages whole.

Stages, each over the same deliveries, in frames of ``FRAME`` records, the
best and median of ``REPEATS`` rounds of all of them (CPU time):

1. baseline: ``msgpack.unpackb`` of the capture's frame bodies, nothing built;
2. the old encoder (``capture.wire.CaptureEncoder``) of the deliveries;
3. the old decoder (``capture.wire.CaptureDecoder``) of its bodies, with
   every message built (the reader's work, without framing and CRC);
4. msgspec encoding the Struct mirrors;
5. msgspec decoding them into Struct mirrors;
6. building one ``TenantChecked`` (a tenant monitor's verdict, made for
   every credit read): the message type against its generated mirror
   (once a frozen dataclass against a Struct; both Structs now).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import types  # noqa: E402
import typing  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from typing import Any, Union  # noqa: E402


try:
    import msgspec
except ImportError:
    sys.exit("this bench needs msgspec: pip install msgspec")

from capture import CaptureReader  # noqa: E402
from capture.format import DeliveryRecord  # noqa: E402
from capture.wire import CaptureDecoder, CaptureEncoder  # noqa: E402
from messages.codec import registry  # noqa: E402
from messages.scheduler import TenantChecked  # noqa: E402
from replay_speed import REPEATS, make_capture, msgpack_alone, rounds  # noqa: E402  (the same capture, the same rounds)

FRAME = 1024


def struct_mirrors() -> dict[type, type]:
    """A Struct for every registered message type: its fields, types and defaults, tagged by its name."""
    classes = {cls.__name__: cls for cls in registry().values()}
    mirrors: dict[type, type] = {}

    def mirror_type(tp: Any) -> Any:
        if tp in mirrors:
            return mirrors[tp]
        if isinstance(tp, type) and tp in classes.values():
            return mirror(tp)
        origin = typing.get_origin(tp)
        if origin is None:
            return tp
        args = tuple(mirror_type(a) if a is not Ellipsis else a for a in typing.get_args(tp))
        if origin is Union or origin is types.UnionType:  # Optional[X] and X | None alike
            return Union[args]  # type: ignore[return-value]
        return origin[args]

    def mirror(cls: type) -> type:
        if cls in mirrors:
            return mirrors[cls]
        hints = typing.get_type_hints(cls, localns=classes)
        fields: list[tuple[Any, ...]] = []
        for f in msgspec.structs.fields(cls):
            tp = mirror_type(hints[f.name])
            if f.default is not msgspec.NODEFAULT:
                fields.append((f.name, tp, f.default))
            elif f.default_factory is not msgspec.NODEFAULT:
                fields.append((f.name, tp, msgspec.field(default_factory=f.default_factory)))
            else:
                fields.append((f.name, tp))
        mirrors[cls] = msgspec.defstruct(
            cls.__name__, fields, array_like=True, frozen=True, gc=False, tag=cls.MESSAGE_NAME,  # type: ignore[attr-defined]
        )
        return mirrors[cls]

    for cls in classes.values():
        mirror(cls)
    return mirrors


def to_mirror(value: Any, mirrors: dict[type, type]) -> Any:
    m = mirrors.get(type(value))
    if m is not None:
        return m(*(to_mirror(getattr(value, f.name), mirrors) for f in msgspec.structs.fields(value)))
    if isinstance(value, tuple):
        return tuple(to_mirror(v, mirrors) for v in value)
    return value


def main() -> int:
    # No options: --help says what it measures (the module's doc) instead of running it.
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    directory = tempfile.mkdtemp(prefix="lw-struct-bench-")
    try:
        paths, _ = make_capture(directory)
        records = [e.record for e in CaptureReader(paths) if type(e.record) is DeliveryRecord]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    n = len(records)
    frames = [[[r.seq, r.at, r.sender, r.recipient, r.cause, r.message] for r in records[i : i + FRAME]]
              for i in range(0, n, FRAME)]

    encoder = CaptureEncoder({"lease": "uuid"})
    bodies = [encoder.encode([0, frame]) for frame in frames]
    decoder = CaptureDecoder()
    decoder.declare(tuple((t.index, t.name, t.version, tuple(t.fields)) for t in encoder.take_new()))
    decoded = [decoder.decode(b) for b in bodies]
    assert not decoder.problems and [tuple(d[5] for d in body[1]) for body in decoded] == [
        tuple(r[5] for r in frame) for frame in frames]

    mirrors = struct_mirrors()
    mirror_frames = [[(*row[:5], to_mirror(row[5], mirrors)) for row in frame] for frame in frames]
    union = Union[tuple(mirrors.values())]  # type: ignore[valid-type]
    struct_encoder = msgspec.msgpack.Encoder()
    struct_decoder = msgspec.msgpack.Decoder(list[tuple[int, datetime, str, str, int, union]])  # type: ignore[valid-type]
    blobs = [struct_encoder.encode(frame) for frame in mirror_frames]
    assert [struct_decoder.decode(b) for b in blobs] == [list(f) for f in mirror_frames]

    def baseline() -> None:
        msgpack_alone(bodies)

    fresh = CaptureEncoder({"lease": "uuid"})

    def capture_encode() -> None:
        fresh.new_file()  # each round interns from scratch, as a new capture file does
        for frame in frames:
            fresh.encode([0, frame])

    def capture_decode() -> None:
        for b in bodies:
            decoder.decode(b)

    def struct_encode() -> None:
        for frame in mirror_frames:
            struct_encoder.encode(frame)

    def struct_decode() -> None:
        for b in blobs:
            struct_decoder.decode(b)

    at = datetime(2026, 3, 1, tzinfo=timezone.utc)
    checked = mirrors[TenantChecked]

    def build_dataclass() -> None:
        for i in range(n):
            TenantChecked(i, "manifest1tenant00007", at, None, (), "depletes")

    def build_struct() -> None:
        for i in range(n):
            checked(i, "manifest1tenant00007", at, None, (), "depletes")

    stages = {
        "msgpack alone (baseline)": baseline,
        "formats 1-3 encoder": capture_encode,
        "formats 1-3 decoder": capture_decode,
        "Struct encode (msgspec)": struct_encode,
        "Struct decode (msgspec)": struct_decode,
        "build TenantChecked": build_dataclass,
        "build its Struct mirror": build_struct,
    }
    times = rounds(stages)
    best = {k: min(v) / n for k, v in times.items()}
    median = {k: statistics.median(v) / n for k, v in times.items()}
    size = sum(map(len, bodies)), sum(map(len, blobs))
    print(f"{n:,} deliveries of a real capture ({len(frames)} frames); {size[0] / n:.0f} B/record in capture's "
          f"format, {size[1] / n:.0f} B/record as Structs")
    print(f"{'':<26} {'best of ' + str(REPEATS):>24}   {'median':>24}")
    base, base_median = best["msgpack alone (baseline)"], median["msgpack alone (baseline)"]
    for name in stages:
        print(f"{name:<26} {best[name] * 1e6:7.2f} us/record {best[name] / base:5.2f}x"
              f"   {median[name] * 1e6:7.2f} us/record {median[name] / base_median:5.2f}x   (of the baseline)")
    for ours, theirs, what in (("formats 1-3 encoder", "Struct encode (msgspec)", "encoding"),
                               ("formats 1-3 decoder", "Struct decode (msgspec)", "decoding"),
                               ("build TenantChecked", "build its Struct mirror", "building a verdict")):
        print(f"{what}: Structs take {best[theirs] / best[ours]:.2f} of the time (medians: "
              f"{median[theirs] / median[ours]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
