"""The part of backstep that lives in the user's process: it imports torch, never textual.

``capture`` hooks every backward pass, ``controller`` decides where to stop, ``summary``
describes tensors, ``graph``/``saved``/``naming`` describe nodes, ``recorder`` writes traces,
``runner`` runs a script the way ``python`` would, ``debuggee`` serves the live UI.
"""
