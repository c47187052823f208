"""``python -m openreg_lab``: the command line (see ``openreg_lab.cli``)."""

from __future__ import annotations

import sys

from openreg_lab.cli import main

if __name__ == "__main__":
    sys.exit(main())
