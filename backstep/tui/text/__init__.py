"""How things read on screen: tensor summaries and sizes as rich text, names fitted into cells,
compiled regions' labels, the "edited" mark, and the guard that shows a trace's strings without
obeying them. No widgets here."""
