"""The trace index opens real and damaged traces and reads them one pass at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backstep.events.form import expand
from backstep.traces.index import TraceIndex
from backstep.traces.passes import TraceError
from tests.replay_traces import EVERYTHING, record


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("traces")
    return {
        "full": record(directory, "full", EVERYTHING),
        "nosource": record(directory, "nosource", EVERYTHING, "--no-source"),
    }


def events(path: Path) -> list[dict]:
    return [expand(json.loads(line)) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("kind", ["full", "nosource"])
def test_every_pass_indexes_and_reads_like_the_file(traces: dict[str, Path], kind: str) -> None:
    path = traces[kind]
    everything = events(path)
    with TraceIndex(path) as index:
        assert index.note() is None
        assert index.session == everything[0]
        assert index.exit is not None and index.exit["code"] == 0
        begins = [e for e in everything if e["event"] == "pass_begin"]
        assert index.numbers() == sorted(e["pass"] for e in begins)
        # retained graph (2 passes), checkpoint outer + nested, 2 threads x 3
        assert len(begins) == 2 + 2 + 6
        assert any(e["parent"] is not None for e in begins), "the nested pass has a parent"
        assert len({e["thread"] for e in begins}) >= 3
        for begin in begins:
            one = index.read(begin["pass"])
            assert one.begin == begin
            expected = [e for e in everything
                        if e.get("pass") == begin["pass"] and e["event"] != "pass_begin"]
            assert one.events == expected
            assert one.end is not None and one.end["status"] == "ok"
            assert index.passes[begin["pass"]].steps == len(one.steps) > 0


def test_passes_interleaved_line_by_line_read_apart(traces: dict[str, Path],
                                                   tmp_path: Path) -> None:
    """Two threads' passes share the file line by line; each pass still reads alone."""
    lines = traces["full"].read_text().splitlines(keepends=True)
    parsed = [json.loads(line) for line in lines]
    last_two = sorted({e["pass"] for e in parsed if "pass" in e})[-2:]
    mine = [[line for line, e in zip(lines, parsed, strict=True) if e.get("pass") == n]
            for n in last_two]
    rest = [line for line, e in zip(lines, parsed, strict=True)
            if e.get("pass") not in last_two and e["event"] != "exit"]
    mixed = [line for pair in zip(*mine, strict=False) for line in pair]
    for group in mine:
        mixed += group[min(map(len, mine)):]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(rest + mixed))
    with TraceIndex(path) as index, TraceIndex(traces["full"]) as plain:
        assert index.note() is None
        for number in last_two:
            assert index.read(number).events == plain.read(number).events


def test_a_pass_read_while_the_file_is_still_being_indexed_grows_as_it_is(
        traces: dict[str, Path]) -> None:
    """The index keeps a byte range per pass, not per line; the lines found in it for a pass
    read halfway through the scan are found again once the scan has gone further."""
    path = traces["full"]
    with TraceIndex(path) as plain:
        want = {n: plain.read(n).events for n in plain.numbers()}
    with TraceIndex(path, partial=True) as index:
        seen: dict[int, int] = {}
        while True:
            for number in index.numbers():
                got = index.read(number).events
                assert got == want[number][:len(got)]
                assert len(got) >= seen.get(number, 0)
                seen[number] = len(got)
            if index.scan(256):
                break
        assert {n: index.read(n).events for n in index.numbers()} == want
        assert all(not hasattr(p, "starts") for p in index.passes.values())


def test_a_cut_off_last_line_opens_the_rest_and_says_so(traces: dict[str, Path],
                                                      tmp_path: Path) -> None:
    data = traces["full"].read_bytes()
    lines = data.splitlines(keepends=True)
    # the run was killed mid-write, inside its last pass (the trace ends with history lines)
    end = max(i for i, line in enumerate(lines) if b'"pass_end"' in line)
    cut = b"".join(lines[:end - 1]) + lines[end - 1][: len(lines[end - 1]) // 2]
    path = tmp_path / "cut.jsonl"
    path.write_bytes(cut)
    with TraceIndex(path) as index:
        note = index.note()
        assert note is not None and "\n" not in note
        assert "last line is cut off" in note
        assert "did not finish" in note
        unfinished = [n for n, p in index.passes.items() if not p.complete]
        assert len(unfinished) >= 1  # (threads: the pass cut off is not always the last one)
        assert all(index.read(n).end is None for n in unfinished)


def test_corrupt_lines_in_the_middle_are_skipped_and_counted(traces: dict[str, Path],
                                                             tmp_path: Path) -> None:
    lines = traces["full"].read_bytes().splitlines(keepends=True)
    lines[3] = b"garbage\n"
    lines[5] = b'{"event":"node","pass":1,"step":\n'
    path = tmp_path / "corrupt.jsonl"
    path.write_bytes(b"".join(lines))
    with TraceIndex(path) as index:
        assert "2 unreadable line(s) skipped (first: line 4)" in (index.note() or "")
        original = sum(1 for e in events(traces["full"]) if e["event"] == "node" and e["pass"] == 1)
        assert len(index.read(1).steps) == index.passes[1].steps == original - 2


def test_a_newer_version_opens_with_a_note(traces: dict[str, Path], tmp_path: Path) -> None:
    lines = traces["full"].read_text().splitlines(keepends=True)
    session = json.loads(lines[0])
    session["version"] = 99
    path = tmp_path / "newer.jsonl"
    path.write_text(json.dumps(session) + "\n" + "".join(lines[1:]))
    with TraceIndex(path) as index:
        assert "newer backstep (schema version 99" in (index.note() or "")
        assert len(index.numbers()) == 10


@pytest.mark.parametrize("content, words", [
    (b"", "is empty"),
    (b"hello world\nthis is not json\n", "not a backstep trace"),
    (b'{"a": 1}\n{"b": 2}\n', "not a backstep trace"),
    (b"\x00\x01\x02binary", "not a backstep trace"),
])
def test_a_file_that_is_not_a_trace_is_a_trace_error(tmp_path: Path, content: bytes,
                                                     words: str) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=words):
        TraceIndex(path)


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        TraceIndex(tmp_path / "nope.jsonl")


def test_a_partial_index_shows_the_first_pass_then_scans_in_slices(traces) -> None:
    with TraceIndex(traces["full"]) as whole, TraceIndex(traces["full"], partial=True) as part:
        assert not part.done and part.numbers() == [1]
        assert part.read(1).events == whole.read(1).events
        slices = 0
        while not part.scan(2000):
            slices += 1
        assert slices > 3 and part.done
        assert part.numbers() == whole.numbers()
        for number in whole.numbers():
            assert part.read(number).events == whole.read(number).events
        assert part.note() == whole.note() is None


@pytest.mark.parametrize("kind", ["full", "nosource"])
def test_lines_found_a_node_at_a_time_are_the_lines_found_at_once(
        traces: dict[str, Path], kind: str) -> None:
    """A replay finds a pass's lines only as far as the cursor goes: node by node, they come
    out as the whole pass's, in order, and nothing past the node asked for is looked at."""
    with TraceIndex(traces[kind]) as whole, TraceIndex(traces[kind]) as lazy:
        for number in whole.numbers():
            full = whole.pass_lines(number)
            assert full.complete and len(full.nodes) == whole.passes[number].steps
            assert [full.kinds[i] for i in full.nodes] == [1] * len(full.nodes)
            first = lazy.pass_lines(number, 1)
            assert not first.complete and len(first.nodes) == 1
            assert first.found == full.ends[full.nodes[0]]  # up to its first node line
            for k in range(2, len(full.nodes) + 2):
                found = lazy.pass_lines(number, k)
                assert found is first  # the same lines, found further
                assert list(found.nodes[:k]) == list(full.nodes[:k])
            assert found.complete
            for name in ("starts", "ends", "kinds", "nodes"):
                assert list(getattr(found, name)) == list(getattr(full, name)), name
            assert lazy.pass_lines(number) is found
