"""The saved-tensors table, laid out by hand: every line fits the panel, the columns line up
under their headers, the status is never cut while the names can give way, and the spare room is
shared out as rich's expanded Table shares it (the snapshot tests hold its look cell for cell)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from backstep.tui.panels.saved import SavedPanel, saved_table
from backstep.tui.state.node_record import saved_infos
from backstep.tui.state.records import SavedInfo
from backstep.tui.text.format import cut_apart, cut_middle, nbytes, shape_text
from tests.tui_fixtures import RecordingLink, example_events, live_app, upto_stop
from tests.tui_pilot import pilot, settle

BIG = SavedInfo("self", "alive", (8, 1024, 768), "float32", 25165824, 0, 0)
MAT = SavedInfo("mat2", "alive", (768, 768), "float32", 2359296)


def lines(table: Text) -> list[str]:
    return table.plain.split("\n")


def test_status_kept_whole_where_the_dtype_can_go() -> None:
    # a GPT-2 block's matmul in a 46-cell panel: rich's table cut "alive" to "aliv"; now the
    # dtype goes first, and every column is whole
    out = lines(saved_table([BIG, MAT], False, 46))
    assert [len(line) for line in out] == [46] * 3
    assert out[0].split() == ["name", "tensor", "bytes", "status"]
    assert out[1].split() == ["self", "[8,", "1024,", "768]", "24.0", "MiB", "alive"]
    assert "float32" not in out[1]
    wide = lines(saved_table([BIG, MAT], False, 60))
    assert "float32" in wide[1] and wide[1].rstrip().endswith("alive")


def test_columns_line_up_under_their_headers() -> None:
    out = lines(saved_table([BIG, MAT], True, 70))
    head = out[0]
    for line in out[1:]:
        assert line[head.index("tensor")] == "["  # left-aligned under its header
        end = head.index("bytes") + len("bytes")
        assert line[end - 3 : end] == "MiB"  # bytes right-aligned to its header's end
        assert line[head.index("status") :].strip() == "freed"  # released after the node ran


def test_every_line_fits_and_the_status_survives_where_names_can_be_cut() -> None:
    rnd = random.Random(7)
    names = ["self", "other", "mat1_sym_sizes_0", "weight_with_a_long_name_indeed", "x"]
    for _ in range(500):
        saved = [SavedInfo(rnd.choice(names), rnd.choice(["alive", "freed", "modified"]),
                           tuple(rnd.choice([1, 3, 768, 1024]) for _ in range(rnd.randint(0, 3))),
                           rnd.choice(["float32", "bfloat16"]), rnd.randint(0, 10**9))
                 for _ in range(rnd.randint(1, 4))]
        width = rnd.randint(40, 120)
        out = lines(saved_table(saved, False, width))
        assert all(len(line) <= width for line in out)
        # the least a whole row needs: names cut to 4 cells, no dtype, two cells a column
        # (the tensor and bytes headers are never the widest here)
        least = 8 + 4 + max(len(shape_text(i.shape)) for i in saved) + \
            max(len(nbytes(i.bytes)) for i in saved) + max(len("status"), *(
                len(i.status) for i in saved))
        if width >= max(least, 40):
            for item, line in zip(saved, out[1:], strict=True):
                assert line.rstrip().endswith(item.status), (width, line)


def test_spare_room_is_shared_as_rich_shares_it() -> None:
    # the columns as a rich Table of the same widths lays them out, expanded to the panel
    rnd = random.Random(11)
    for _ in range(100):
        rows = [SavedInfo(f"t{i}" * rnd.randint(1, 6), rnd.choice(["alive", "freed"]),
                          (rnd.randint(1, 4096),) * rnd.randint(0, 3), "float32",
                          rnd.randint(0, 10**9)) for i in range(rnd.randint(1, 4))]
        width = rnd.randint(70, 140)
        out = lines(saved_table(rows, False, width))
        table = Table(box=None, padding=(0, 1), expand=True, show_edge=False)
        for i, title in enumerate(out[0].split()):
            table.add_column(title, header_style="bold dim", no_wrap=True,
                             justify="right" if title == "bytes" else "left",
                             min_width=6 if i == 0 else None)
        for line in out[1:]:
            name, rest = line.split(maxsplit=1)
            *tensor, size, unit, status = rest.split()
            table.add_row(name, " ".join(tensor), f"{size} {unit}", status)
        console = Console(width=width)
        drawn = ["".join(s.text for s in row).rstrip()
                 for row in console.render_lines(table, console.options, pad=False)]
        assert [line.rstrip() for line in out] == drawn, (width, out, drawn)


def mm_saved() -> list[SavedInfo]:
    """What a matmul's and a loss's backward save beside their tensors, as the model reads the
    recorder's entries: sizes and strides, an optional weight never saved, an ignore index."""
    return list(saved_infos(MM_RAW))


MM_RAW: list[dict[str, Any]] = [
    {"name": "mat1", "status": "alive", "shape": [4096, 768], "dtype": "float32",
     "bytes": 12582912},
    {"name": "mat1_sym_sizes", "status": "scalar", "value": [4096, 768]},
    {"name": "mat1_sym_strides", "status": "scalar", "value": [768, 1]},
    {"name": "mat2_sym_sizes", "status": "scalar", "value": [768, 50257]},
    {"name": "mat2_sym_strides", "status": "scalar", "value": [1, 768]},
    {"name": "weight", "status": "none", "shape": None, "dtype": None, "bytes": 0},
    {"name": "ignore_index", "status": "scalar", "value": -100},
    {"name": "label_smoothing", "status": "scalar", "value": 0.1},
]


def test_sibling_names_stay_apart_and_scalars_show_their_values() -> None:
    # the panel: ma…sizes, ma…rides, ma…sizes, ma…rides, and "scalar  scalar"; at 40
    # a size list gives way (cut in the middle) to the 8 name cells that keep them apart
    for width in (40, 43, 47, 52):
        out = lines(saved_table(mm_saved(), False, width))
        names = [line.split()[0] for line in out[1:]]
        assert len(set(names)) == len(names), (width, names)
        assert all(len(line) <= width for line in out)
        assert names[1].startswith("mat1") and names[3].startswith("mat2"), names
        assert "scalar" not in "\n".join(out)
        rows = dict(zip(names, out[1:], strict=True))
        assert rows[names[2]].split()[1:] == ["[768,", "1]"]  # the strides, no status
        assert rows[names[5]].split()[1:] == ["None"]  # the optional tensor, not "none"
        assert rows[names[6]].split()[1:] == ["-100"]
        assert rows[names[7]].split()[1:] == ["0.1"]
    wide = lines(saved_table(mm_saved(), False, 70))
    assert [line.split()[0] for line in wide[1:]] == [item.name for item in mm_saved()]


def test_cut_apart_keeps_the_head_and_tail_that_tell_names_apart() -> None:
    names = ["mat1_sym_sizes", "mat1_sym_strides", "mat2_sym_sizes", "mat2_sym_strides"]
    assert cut_apart(names, 10) == ["mat1…sizes", "mat1…rides", "mat2…sizes", "mat2…rides"]
    assert cut_apart(["self", "result"], 4) == ["self", "r…lt"]
    assert cut_apart(["a_long_name_indeed"], 9) == [cut_middle("a_long_name_indeed", 9)]


@pytest.mark.parametrize("size", [(80, 24), (110, 32), (140, 42), (160, 48)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pilot
async def test_the_panel_keeps_siblings_apart_and_shows_values(size: tuple[int, int]) -> None:
    events = copy.deepcopy(upto_stop(1, example_events()))
    events[-1]["saved"] = copy.deepcopy(MM_RAW)
    app = live_app(RecordingLink(events))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        panel = app.query_one(SavedPanel)
        out = str(panel.render()).split("\n")
        names = [line.split()[0] for line in out[1:len(MM_RAW) + 1]]
        assert len(set(names)) == len(names), (size, names)
        assert all(len(line) <= panel.content_region.width for line in out)
        text = "\n".join(out)
        assert "scalar" not in text and "none" not in text, text
        assert "-100" in text and "None" in text and "0.1" in text, text
