"""The help screen: the keys, pdb-style."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("n", "step: run the paused node, stop before the next one"),
    ("c", "continue to the next breakpoint or the next pass start"),
    ("f", "finish the current pass without stopping"),
    ("p", "step back: review earlier nodes as they were, back across passes (n returns)"),
    ("[ / ]", "review: the start of this or the previous pass / of the next pass"),
    ("", "several passes at once (threads, GPUs): n, c and f act on"),
    ("", "the shown pass; the others stay paused where they are, and"),
    ("", "the one that has waited longest is shown next (\"2 passes"),
    ("", "waiting\"), so n takes turns between paused passes"),
    ("b", "toggle a breakpoint on the selected node's type"),
    ("B", "breakpoint conditions: node glob, module glob, leaf, non-finite, norm above"),
    ("enter", "on a gradient: open the tensor view (values fetched on demand)"),
    ("tab", "move between panels; arrows move in the graph"),
    ("click", "a node selects it; a gradient opens the tensor view; a module folds / unfolds"),
    ("z", "maximise the focused panel; z again restores the layout"),
    ("/", "search: part of a node name, module path or leaf name; enter selects the next match"),
    ("n / N", "while a search is up: next / previous match (n steps again once escape leaves it)"),
    ("escape", "leave the search (or restore a maximised panel)"),
    ("m", "module view: nodes folded by module path, with done/pending, largest norm, ✗ NaN"),
    ("", "right / left unfold and fold a module; m again shows the graph"),
    ("F", "gradient flow: each leaf's ‖grad‖ and max |grad| in model order, log scale"),
    ("", "in the chart, left / right: a leaf's full name and numbers"),
    ("ctrl+c", "interrupt: stop at the next node while the script runs"),
    ("i", "type a line for the script's stdin (offered by itself when the script waits on it)"),
    (": / !", "at a stop: a line of Python, run in the script over the paused node:"),
    ("", "grad_outputs, grad_inputs, saved, node, leaves, _, the caller's names;"),
    ("", "up / down recall, ctrl+c interrupts, escape goes back"),
    ("e", "at a stop: edit the gradient for the rest of the pass: zero_nonfinite(),"),
    ("", "clip(n), scale(k), set_grad(i, t); the pass is marked \"edited by you\""),
    ("d / D", "next / previous diagnosis: selects its node, shows its line in Source"),
    ("x", "dismiss the diagnosis banner (d brings it back)"),
    ("?", "this help"),
    ("q", "quit: end the script and leave (every paused thread is released)"),
)


def keys_table() -> Table:
    table = Table(box=None, padding=(0, 2), show_header=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for key, what in KEYS:
        table.add_row(key, what)
    return table


class HelpScreen(ModalScreen[None]):
    """A modal list of the keys; any of escape, q or ? closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "close"),
        Binding("q", "dismiss", "close"),
        Binding("question_mark", "dismiss", "close"),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static("backstep — keys", id="help-title")
            yield Static(keys_table())
            yield Static("escape closes", classes="dim-hint")

