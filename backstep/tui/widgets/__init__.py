"""Reusable widgets, not tied to backstep's data: ``RowList`` (a scrolling list of one-line rows
drawn straight to strips) and ``LightTree`` (a Tree that measures rows without rendering them),
and border titles that repaint only when they change."""
