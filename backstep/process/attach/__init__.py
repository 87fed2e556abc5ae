"""``backstep.attach()`` and its kinds: the UI on this terminal, a remote UI, a browser, a
trace. ``attachment.py`` chooses and arms one; ``ui.py`` is the UI child a terminal attachment
starts."""
