"""Where events go: a JSON-lines file for ``backstep trace``, a list for tests."""

from __future__ import annotations

import errno
import json
import os
import threading
from typing import IO, Any, Protocol

from backstep.events.form import compact_event, compact_saved, compact_summary
from backstep.events.text import Encoded
from backstep.protocol import encode

_NODE_KEYS = ("event", "pass", "step", "id", "name", "grad_outputs", "grad_inputs", "saved",
              "error")
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
# an event's text where it is an ``Encoded`` (TypeError for any other dict, and from the join
# where it is None: such a batch is written event by event, as is one that cannot be encoded)
_text = Encoded.text.__get__  # type: ignore[attr-defined]


class Sink(Protocol):
    def emit(self, event: dict[str, Any]) -> None: ...

    def flush(self) -> None: ...


def emit_all(sink: Sink, events: list[dict[str, Any]]) -> None:
    """``sink.emit`` each event in order, in one call where the sink takes a batch
    (``emit_many``): a recorded pass hands over its node events a few hundred at a time."""
    many = getattr(sink, "emit_many", None)
    if many is not None:
        many(events)
    else:
        for event in events:
            sink.emit(event)


class JsonlRecorder:
    """Appends events to a binary file, one strict-JSON line each; thread-safe. Events are
    written in their file form (``events.form``: keys at their default value left out).

    Most of a trace is gradient summaries, and most summaries appear twice: as one node's
    ``grad_inputs`` and the next node's ``grad_outputs`` (the same dict). Node events are
    written from the text of each summary: the one it carries (``events.text``), else encoded once
    while it is in use.

    A write that fails (a full disk, ``ulimit -f``) is never the script's problem: the first
    failure is kept in ``failure`` and nothing more is written, so the file holds no gap;
    ``close()`` then cuts it back to its last whole line (a valid trace, just shorter) and says
    where, in one line. (Python ignores SIGXFSZ, as a shell does not: past ``ulimit -f`` a write
    fails with EFBIG instead of killing the script.)
    """

    CACHE = 4096  # summaries remembered (each held, so its id() cannot be reused meanwhile)

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self._lock = threading.Lock()
        self._texts: dict[int, tuple[Any, str]] = {}
        self.abandoned = False
        self.failure: OSError | None = None  # the first write that failed

    def _summaries(self, group: Any) -> str:
        if group is None:
            return "null"
        texts = self._texts
        parts = []
        for summary in group:
            if type(summary) is Encoded and summary.text is not None:
                parts.append(summary.text)
                continue
            hit = texts.get(id(summary))
            if hit is None or hit[0] is not summary:
                if len(texts) >= self.CACHE:
                    texts.clear()
                hit = texts[id(summary)] = (summary, _dumps(compact_summary(summary)))
            parts.append(hit[1])
        return "[" + ",".join(parts) + "]"

    def _encode(self, event: dict[str, Any]) -> bytes:
        if tuple(event) != _NODE_KEYS:
            if event.get("event") == "pass_end":
                self._texts.clear()
            return encode(compact_event(event))
        number, step, node_id, name, error = (event["pass"], event["step"], event["id"],
                                              event["name"], event["error"])
        if not (type(number) is int and type(step) is int and type(node_id) is int
                and type(name) is str and name.isidentifier() and error is None):
            return encode(compact_event(event))
        return (
            f'{{"event":"node","pass":{number},"step":{step},"id":{node_id},"name":"{name}",'
            f'"grad_outputs":{self._summaries(event["grad_outputs"])},'
            f'"grad_inputs":{self._summaries(event["grad_inputs"])},'
            f'"saved":{_dumps(compact_saved(event["saved"]))}}}\n'
        ).encode()

    def emit(self, event: dict[str, Any]) -> None:
        if self.abandoned or self.failure is not None:
            return
        with self._lock:
            try:
                if type(event) is Encoded and event.text is not None:
                    data = event.text.encode()
                    if event.get("event") == "pass_end":
                        self._texts.clear()  # as ``_encode`` does: a pass's summaries go
                else:
                    data = self._encode(event)
            except (TypeError, ValueError):
                data = encode(event)  # raises as it always did for what JSON cannot carry
            self._write(data)

    def emit_many(self, events: list[dict[str, Any]]) -> None:
        """``emit`` each event, with one lock and one write for them all."""
        if self.abandoned or self.failure is not None:
            return
        with self._lock:
            if not Encoded.__subclasses__():  # ``_text`` reads exactly the Encoded ones
                try:  # the common batch: every event carries its text; one join, one encode
                    data = "".join(map(_text, events)).encode()
                except (TypeError, ValueError):  # not one: event by event, as below
                    pass
                else:
                    self._write(data)
                    return
            chunks = []
            try:
                for event in events:
                    if type(event) is Encoded and event.text is not None:
                        chunks.append(event.text.encode())
                        continue
                    try:
                        chunks.append(self._encode(event))
                    except (TypeError, ValueError):
                        chunks.append(encode(event))  # raises as ``emit`` does
            finally:  # what came before an event JSON cannot carry is written, as by ``emit``
                self._write(b"".join(chunks))

    def _write(self, data: bytes) -> None:
        if self.failure is not None:
            return
        try:
            self.stream.write(data)
        except OSError as exc:  # a full disk must never break the user's script
            self.failure = exc
        except ValueError:
            pass  # a closed file (the script closed it): nothing to record into

    def flush(self) -> None:
        if self.abandoned or self.failure is not None:
            return
        with self._lock:
            try:
                self.stream.flush()
            except OSError as exc:
                self.failure = exc
            except ValueError:
                pass

    def close(self) -> str | None:
        """Flush and close the file; when a write failed, cut it back to its last whole line
        and return the one line that says so (None when the whole run was recorded)."""
        with self._lock:
            try:
                if self.failure is None:
                    self.stream.flush()
            except OSError as exc:
                self.failure = exc
            except ValueError:
                pass
            try:
                self.stream.close()
            except OSError as exc:  # the buffer's last bytes: the file is cut below anyway
                self.failure = self.failure or exc
        if self.failure is None:
            return None
        name = getattr(self.stream, "name", None)
        cut_back = getattr(self.stream, "cut_back", None)  # a compressed trace counts its own
        if callable(cut_back):
            lines = cut_back()
        else:
            lines = cut_to_whole_lines(name) if isinstance(name, str) else None
        failure = self.failure
        why = f"{failure.strerror or failure}" + (
            f", {errno.errorcode[failure.errno]}" if failure.errno in errno.errorcode else "")
        where = f"after event {lines}" if lines is not None else "early"
        return (f"backstep: the trace {name} is cut {where} ({why}): the rest of the run was "
                "not recorded")


    def abandon(self) -> None:
        """In a forked child: write nothing more, and let go of the file without flushing the
        parent's pending bytes or taking a lock a parent thread may have held at fork time."""
        from backstep.process.forks import abandon_file

        self.abandoned = True
        abandon_file(self.stream)


class ListRecorder:
    """Keeps events in memory (tests)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def flush(self) -> None:
        pass

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]


def cut_to_whole_lines(path: str, block: int = 1 << 16) -> int | None:
    """Truncate the file after its last newline (a write cut short leaves half a line) and
    count its lines, the events it holds; None when it cannot be done."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        end = os.fstat(fd).st_size
        while end > 0:
            start = max(0, end - block)
            newline = os.pread(fd, end - start, start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        os.ftruncate(fd, end)
        lines, at = 0, 0
        while at < end:
            data = os.pread(fd, min(block << 6, end - at), at)
            if not data:
                break
            lines += data.count(b"\n")
            at += len(data)
        return lines
    except OSError:
        return None
    finally:
        os.close(fd)
