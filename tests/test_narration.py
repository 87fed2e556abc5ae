"""The narration format: what loads, which text wins at a stop, and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from backstep.demo import narration

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


# -- templates filled from the run -------------------------------------------------------------


def test_render_fills_measured_values_ids_and_saved_bytes() -> None:
    values = {"max_diff": 1.5e-08, "id": {2: {4: 11}, 1: {4: 4}}, "saved": {"self": 128},
              "names": ["MulBackward0", "ExpBackward0"], "gone": None}
    text = "d={max_diff:.1e} new={id[2][4]} old={id[1][4]} b={saved[self]} n={names} g={gone}"
    assert narration.render(text, values) == (
        "d=1.5e-08 new=11 old=4 b=128 n=['MulBackward0', 'ExpBackward0'] g=None"
    )


def test_render_shows_a_value_the_run_has_not_produced_as_missing() -> None:
    text = "d={max_diff:.1e} at {id[3][1]} {saved[mat1]}"
    assert narration.render(text, {"id": {}, "saved": {}}) == "d=… at … …"
    assert narration.render("{x:d}", {"x": "text"}) == "…"  # a value of the wrong kind
    assert narration.render('f"{{x.grad}}" stays literal', {}) == 'f"{x.grad}" stays literal'


def test_fields_lists_what_a_template_needs() -> None:
    assert narration.fields("a {x:.1e} {id[2][4]} {saved[self]} {{literal}}") == [
        "x", "id", "saved"
    ]
    assert narration.fields("no fields") == []


def test_measured_reads_the_scripts_measured_lines() -> None:
    out = (
        "A. something\n"
        "  measured: max_diff = 1.5e-08\n"
        "  checked: a fact\n"
        "  measured: held = [128, 256]\n"
        "  measured: flag = false\n"
        "  measured: broken = [1,\n"
        "  measured: max_diff = 3.0e-08\n"  # the last one wins
        "measured: not json = x\n"
    )
    assert narration.measured(out) == {"max_diff": 3.0e-08, "held": [128, 256], "flag": False}


def test_node_ids_by_pass_and_step() -> None:
    assert narration.node_ids([(1, 1, 7), (1, 2, 9), (2, 1, 7)]) == {1: {1: 7, 2: 9}, 2: {1: 7}}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('title = "t"\nintro = "a {x"', "'intro': bad template"),
        ('title = "t"\nintro = "i"\noutro = "a }"', "'outro': bad template"),
        ('title = "t"\nintro = "i"\n[[stop]]\npass = 1\ntext = "{}"', "[[stop]] #1: 'text': bad"),
        ('title = "t"\nintro = "i"\n[[stop]]\npass = 1\ntext = "{0}"', "must start with a name"),
    ],
)
def test_a_broken_template_is_a_clear_error_at_load(text: str, where: str) -> None:
    with pytest.raises(ValueError) as info:
        narration.parse(text, "demo.toml")
    assert str(info.value).startswith("demo.toml: ") and where in str(info.value)
    assert "write {{ and }} for literal braces" in str(info.value)
