"""``python -m memstrata``: the ``memstrata`` command, for environments whose scripts directory
is not on the PATH."""

from memstrata.cli import main

raise SystemExit(main())
