"""``python -m backstep`` is the ``backstep`` command."""

from backstep.cli import main

raise SystemExit(main())
