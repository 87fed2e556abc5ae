"""A channel's reading side over fixed lines, for reader tests that need no process."""

from __future__ import annotations

import json
from typing import Any

from backstep import protocol


class Lines:
    """A channel's reading side over fixed lines (``Channel.receive``, ``parse``, ``last_line``)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.lines = [json.dumps(e).encode() + b"\n" for e in events]
        self.last_line = b""

    def parse(self, line: bytes) -> Any:
        return protocol.decode(line)

    def receive(self) -> dict[str, Any] | None:
        if not self.lines:
            return None
        self.last_line = self.lines.pop(0)
        return self.parse(self.last_line)
