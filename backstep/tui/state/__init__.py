"""The UI's state, plain Python (no textual): protocol events folded into immutable snapshots
(``model``, ``snapshot``, ``records``, ``pass_log``; a node's record, read when wanted:
``node_record``), the replay timeline of ``show``, the
graph's layout, review and focus. Panels read it; nothing here draws."""
