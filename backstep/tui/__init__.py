"""The live stepping UI (Textual). Never imports torch, not even indirectly."""

from __future__ import annotations

from backstep.tui.app import BackstepApp, Link

__all__ = ["BackstepApp", "Link"]
