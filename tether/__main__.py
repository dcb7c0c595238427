"""``python -m tether serve|token|bench ...``: the same as the ``tether`` command."""

from __future__ import annotations

from tether.collab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
