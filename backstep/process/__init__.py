"""Process plumbing: starting the debuggee (``run``) or the UI (``attach()``), the private socket
between them, and what keeps the user's script whole around them (forks, stdin, output that
outlives the UI). Nothing here imports torch or textual at module level."""
