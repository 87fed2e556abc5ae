"""Reading recorded traces (stdlib only): the index ``show`` pages through, the pass-by-pass
diff, and the Graphviz export."""
