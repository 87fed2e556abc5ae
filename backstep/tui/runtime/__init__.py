"""What runs around the app: the link to the debuggee and its reader thread, signals and a
terminal that went away, the output left behind once the UI closes, the garbage collector."""
