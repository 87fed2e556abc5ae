"""The live stepping UI (Textual). Never imports torch, not even indirectly."""

from __future__ import annotations

from backstep.tui.live_app import BackstepApp
from backstep.tui.runtime.link import Link

__all__ = ["BackstepApp", "Link"]
