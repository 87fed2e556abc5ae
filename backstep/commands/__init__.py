"""One module per subcommand; each has ``add_parser(subparsers)`` and ``main(args) -> int``.

They are imported only to build the parser, so none may import torch or textual at module level:
``backstep run`` must start the UI without loading torch.
"""
