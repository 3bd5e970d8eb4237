"""`retrieval-eval schema NAME`: the JSON Schema of an input or baseline file (no engine imported)."""

from __future__ import annotations

import argparse
import sys

from ..sources.schemas import schema_text
from .exit_codes import EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text(args.name))
    return EXIT_OK
