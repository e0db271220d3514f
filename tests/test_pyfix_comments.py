"""Removing a dead import keeps the comments written above it."""

from __future__ import annotations

import ast

from porter.pyfix import fix_imports

SOURCE = '''import os
# why we import bnb
import bitsandbytes as bnb


def f():
    # # visualize
    # import torchviz

    import bitsandbytes

    opt = 1
    return opt


def g():
    x = 1
    # trailing note
    import bitsandbytes


def h():
    # only one
    import bitsandbytes
'''


def test_comments_above_a_removed_import_stay() -> None:
    out = fix_imports(SOURCE, (), ("bitsandbytes",))
    ast.parse(out)
    assert "import bitsandbytes" not in out
    for comment in ("# why we import bnb", "# # visualize", "# import torchviz", "# trailing note", "# only one"):
        assert comment in out, comment
    # the statement after the removed import keeps its own spacing, and h() gets a body
    assert "    # import torchviz\n\n    opt = 1\n" in out
    assert "    # only one\n    pass\n" in out


def test_blank_lines_only_are_not_carried() -> None:
    out = fix_imports("def f():\n\n    import bitsandbytes\n    return 1\n", (), ("bitsandbytes",))
    assert out == "def f():\n    return 1\n"
