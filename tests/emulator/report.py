"""Print the docs table of tests/emulator/cases.py (run from tests/: python -m emulator.report)."""

from __future__ import annotations

import sys

from .cases import markdown_table

if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
