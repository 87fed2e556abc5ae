"""``JsonlRecorder.emit_many`` writes a batch of events whose text is known in one join: the
same bytes as writing them one by one, and the same as before when one is not known."""

from __future__ import annotations

import gc
import io
import random
from typing import Any

import pytest

from backstep.engine.recorder import JsonlRecorder
from backstep.events.text import Encoded, compact_json


def _encoded(event: dict[str, Any], text: str | None = "") -> Encoded:
    out = Encoded(event)
    out.text = compact_json(event) + "\n" if text == "" else text
    return out


def _events(rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for step in range(rng.randrange(0, 12)):
        event = {"event": "accumulate", "pass": 1, "leaf": f"w{step}", "id": step,
                 "before": None, "after": None, "retained": False, "version": step}
        kind = rng.choice(["text", "text", "text", "none", "plain"])
        out.append(_encoded(event) if kind == "text" else
                   _encoded(event, None) if kind == "none" else event)
    return out


def _written(events: list[dict[str, Any]], batched: bool) -> bytes:
    stream = io.BytesIO()
    recorder = JsonlRecorder(stream)
    if batched:
        recorder.emit_many(events)
    else:
        for event in events:
            recorder.emit(event)
    return stream.getvalue()


@pytest.mark.parametrize("seed", range(20))
def test_a_batch_is_written_as_its_events_one_by_one(seed: int) -> None:
    events = _events(random.Random(seed))
    assert _written(events, batched=True) == _written(events, batched=False)


def test_a_batch_of_texts_is_their_lines_in_order() -> None:
    events = [_encoded({"event": "output", "text": f"line {i}"}) for i in range(5)]
    assert _written(events, batched=True) == b"".join(
        f'{{"event":"output","text":"line {i}"}}\n'.encode() for i in range(5))


def test_a_text_that_cannot_be_written_stops_the_batch_where_it_always_did() -> None:
    """What comes before it is written, then the error is raised (as event by event)."""
    good = _encoded({"event": "output", "text": "ok"})
    bad = _encoded({"event": "output", "text": "x"}, '{"event":"output","text":"\udc80"}\n')
    stream = io.BytesIO()
    with pytest.raises(UnicodeEncodeError):
        JsonlRecorder(stream).emit_many([good, bad, good])
    assert stream.getvalue() == b'{"event":"output","text":"ok"}\n'


def test_a_subclass_of_encoded_is_written_from_its_dict() -> None:
    """Only an ``Encoded`` itself is written from its text (as ``emit_many`` always did)."""

    class Other(Encoded):
        __slots__ = ()

    event = Other({"event": "output", "text": "from the dict"})
    event.text = '{"event":"output","text":"from the text"}\n'
    try:
        assert _written([event], batched=True) == (
            b'{"event":"output","text":"from the dict"}\n')
    finally:
        del Other, event
        gc.collect()  # no subclass left: later batches take the join again
