"""``python -m porter``.

``python -m`` puts the current directory first on ``sys.path``. Run from inside a target
repository, that would let the target's own modules (a ``types.py``, a ``random.py``, a
``flash_attn.py``) shadow the ones porter imports, i.e. execute the target's code. porter
drops that entry before importing anything else (as ``python -P`` would).
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from porter.express import main  # noqa: E402

main()
