"""The event format and the stop rules, each stated once: what every event holds (``spec``, its
field types in ``types``), the form a trace writes it in (``form``) and its JSON text on the hot
path (``text``), the commands a UI sends (``commands``), and breakpoints: parsing, matching a
node, tripping on gradient summaries, their words and the ``stopped`` event (``breakpoints``).
Standard library only: the engine, the trace readers and the UI all import it."""
