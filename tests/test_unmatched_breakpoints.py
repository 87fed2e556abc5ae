"""Issue 44: a breakpoint that matches nothing was silent (``--break 'module:transformer.h.1.*'``
on nanoGPT, whose paths start ``model.transformer...``, never stopped and said nothing). After a
pass the UI says which specs matched none of its nodes, with the nearest real name."""

from __future__ import annotations

from backstep.unmatched import nearest, said, unmatched
from tests.tui_fixtures import RecordingLink, gpt_named_events, live_app
from tests.tui_pilot import pilot, settle

NODES = [("NativeLayerNormBackward0", "model.transformer.h.1.ln_1", None),
         ("AddmmBackward0", "model.transformer.h.1.attn.c_attn", None),
         ("AccumulateGrad", "model.transformer.h.1.attn.c_attn",
          "model.transformer.h.1.attn.c_attn.weight"),
         ("SqrtBackward0", None, None)]


def test_a_pattern_missing_its_prefix_is_offered_with_it() -> None:
    misses = unmatched([{"kind": "module", "pattern": "transformer.h.1.*"}], NODES)
    assert misses == [("module:transformer.h.1.*", "module:model.transformer.h.1.*")]
    assert said(1, misses) == ("breakpoint matched nothing in pass 1: module:transformer.h.1.* "
                               "(nearest: module:model.transformer.h.1.*)")


def test_node_and_leaf_names_get_their_nearest_and_matching_specs_say_nothing() -> None:
    specs = [{"kind": "node", "pattern": "SqrtBackward"},  # the 0 is missing
             {"kind": "leaf", "name": "transformer.h.1.attn.c_attn.weight"},
             {"kind": "node", "pattern": "Addmm*"},  # matches: nothing said
             {"kind": "module", "pattern": "model.transformer.h.1.ln_1"},  # exact: matches
             {"kind": "nonfinite"},  # decided from gradients: never checked here
             {"kind": "node", "pattern": "Zzzqqq*"}]  # nothing near
    assert unmatched(specs, NODES) == [
        ("node:SqrtBackward", "node:SqrtBackward*"),
        ("leaf:transformer.h.1.attn.c_attn.weight",
         "leaf:model.transformer.h.1.attn.c_attn.weight"),
        ("node:Zzzqqq*", None)]
    assert nearest("module", "x", []) is None


@pilot
async def test_after_a_pass_the_ui_says_which_breakpoint_matched_nothing() -> None:
    session, begin, _stop = gpt_named_events()
    link = RecordingLink()
    app = live_app(link, breakpoints=[{"kind": "module", "pattern": "transformer.h.1.*"},
                                      {"kind": "node", "pattern": "NativeLayerNorm*"}])
    async with app.run_test(size=(140, 42)) as pilot:
        await settle(pilot)
        for event in (session, begin):
            app.driver.reader.feed(event)
        await settle(pilot)
        assert not app._notifications  # nothing is said before the pass has ended
        app.driver.reader.feed({"event": "pass_end", "pass": 1, "status": "ok", "error": None,
                                "skipped": []})
        await settle(pilot)
        messages = [n.message for n in app._notifications]
        assert messages == ["breakpoint matched nothing in pass 1: module:transformer.h.1.* "
                            "(nearest: module:model.transformer.h.1.*)"], messages
        # said once: the next pass does not say it again
        app.driver.reader.feed({**begin, "pass": 2})
        app.driver.reader.feed({"event": "pass_end", "pass": 2, "status": "ok", "error": None,
                                "skipped": []})
        await settle(pilot)
        assert len(app._notifications) == 1
