"""What the command's printing asks of the terminal."""

from __future__ import annotations

import os
import sys


def colour_wanted() -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")
