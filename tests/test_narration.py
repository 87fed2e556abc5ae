"""The narration format: what loads, which text wins at a stop, and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from backstep import narration

GOOD = """
title = "Graph basics"
intro = "Before the first stop."
outro = "After the script exits."

[[stop]]
node = "Accumulate*"
text = "any AccumulateGrad"

[[stop]]
node = "AccumulateGrad"
text = "exactly AccumulateGrad"

[[stop]]
pass = 1
step = 1
text = "first stop of pass 1"

[[stop]]
pass = 1
step = 1
node = "PowBackward0"
text = "PowBackward0 at pass 1 step 1"

[[stop]]
pass = 2
text = "anywhere in pass 2"

[[stop]]
pass = 2
text = "a later duplicate never wins a tie"
"""


def test_load_reads_title_intro_outro(tmp_path: Path) -> None:
    path = tmp_path / "demo.toml"
    path.write_text(GOOD, encoding="utf-8")
    n = narration.load(str(path))
    assert n.title == "Graph basics"
    assert n.intro == "Before the first stop."
    assert n.outro == "After the script exits."
    assert len(n.stops) == 6


def test_outro_is_optional() -> None:
    n = narration.parse('title = "t"\nintro = "i"\n')
    assert n.outro is None
    assert n.text_for(1, 1, "MulBackward0") is None


def test_most_specific_stop_wins() -> None:
    n = narration.parse(GOOD)
    assert n.text_for(1, 1, "PowBackward0") == "PowBackward0 at pass 1 step 1"
    assert n.text_for(1, 1, "MulBackward0") == "first stop of pass 1"
    assert n.text_for(3, 4, "AccumulateGrad") == "exactly AccumulateGrad"
    assert n.text_for(3, 4, "AccumulateGradX") == "any AccumulateGrad"
    assert n.text_for(3, 4, "MulBackward0") is None


def test_ties_go_to_the_first_written() -> None:
    n = narration.parse(GOOD)
    assert n.text_for(2, 7, "MulBackward0") == "anywhere in pass 2"


def test_more_keys_beat_an_exact_node_name() -> None:
    text = """title = "t"
intro = "i"
[[stop]]
node = "AddBackward0"
text = "node only"
[[stop]]
pass = 2
node = "Add*"
text = "pass and glob"
"""
    n = narration.parse(text)
    assert n.text_for(2, 3, "AddBackward0") == "pass and glob"
    assert n.text_for(1, 3, "AddBackward0") == "node only"


def test_texts_are_stripped() -> None:
    n = narration.parse('title = "  t "\nintro = """\nline one\nline two\n"""\n')
    assert n.title == "t"
    assert n.intro == "line one\nline two"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('intro = "i"', "missing 'title'"),
        ('title = "t"', "missing 'intro'"),
        ('title = ""\nintro = "i"', "'title' must be a non-empty string"),
        ('title = 3\nintro = "i"', "'title' must be a non-empty string"),
        ('title = "t"\nintro = "i"\noutro = ["x"]', "'outro' must be a non-empty string"),
        ('title = "t"\nintro = "i"\nchapter = 1', "unknown key(s) chapter"),
        ('title = "t"\nintro = "i"\nstop = 3', "'stop' must be an array of tables"),
        ('title = "t"\nintro = "i"\n[[stop]]\ntext = "x"', "[[stop]] #1: key it with at least"),
        ('title = "t"\nintro = "i"\n[[stop]]\npass = 1', "[[stop]] #1: missing 'text'"),
        (
            'title = "t"\nintro = "i"\n[[stop]]\npass = 0\ntext = "x"',
            "'pass' must be an integer >= 1",
        ),
        ('title = "t"\nintro = "i"\n[[stop]]\nstep = "2"\ntext = "x"', "'step' must be an integer"),
        (
            'title = "t"\nintro = "i"\n[[stop]]\nstep = true\ntext = "x"',
            "'step' must be an integer",
        ),
        ('title = "t"\nintro = "i"\n[[stop]]\nnode = ""\ntext = "x"', "'node' must be a non-empty"),
        ('title = "t"\nintro = "i"\n[[stop]]\nnode = "A"\ntxt = "x"', "unknown key(s) txt"),
        ('title = "t"\nintro = "i"\n[[stop]]\nnode = "A"\ntext = "x"\n[[stop]]\n', "[[stop]] #2"),
        ('title = "t', "not valid TOML"),
    ],
)
def test_bad_narration_raises_a_clear_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        narration.parse(text, "demo.toml")
    assert str(info.value).startswith("demo.toml: ")
    assert message in str(info.value)


def test_load_names_the_file_it_cannot_read(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ValueError, match="nope.toml: cannot read narration"):
        narration.load(str(missing))
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'title = "\xff"\n')
    with pytest.raises(ValueError, match="binary.toml: narration is not UTF-8"):
        narration.load(binary)
