"""Classes named by a dotted string: registries, ``hydra.utils.instantiate`` targets, config files.

::

    OPTIMIZERS = {"fused_adam": "apex.optimizers.FusedAdam"}        # Python registry
    if opt_class.startswith("bitsandbytes."): ...                     # dispatch on the name
    optimizer:
      _target_: apex.optimizers.FusedAdam                             # Hydra / Lightning CLI YAML

The string is imported at run time, so it fails on ROCm exactly like an import of the class,
but name resolution never sees it. The families that own a package report these sites; none
rewrites them: the constructor's keyword arguments come from the configuration, where porter
cannot check that every one maps exactly (and torch's defaults differ).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"
# a YAML scalar that is a whole dotted path: `key: a.b.C`, `- a.b.C`, quoted or not, optional comment
_YAML_VALUE = re.compile(rf"""(?:^|:|-)[ \t]*(['"]?)(?P<path>{_DOTTED})\1[ \t]*(?:#.*)?$""")


def is_dotted_path(value: str, package: str) -> bool:
    """``apex.optimizers.FusedAdam`` for package ``apex`` (a whole dotted path, nothing else)."""
    return value.startswith(package + ".") and re.fullmatch(_DOTTED, value) is not None


def prefix_of(value: str, package: str) -> bool:
    """A string used as a package prefix in name dispatch: ``"bitsandbytes."`` / ``"apex"``."""
    return value in (package, package + ".")


def yaml_paths(text: str, package: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, path) of every YAML scalar that is a dotted path inside ``package``."""
    if package not in text:
        return
    offset = 0
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if package in body and len(body) <= 2000 and not body.lstrip().startswith("#"):
            for m in _YAML_VALUE.finditer(body):
                path = m.group("path")
                if is_dotted_path(path, package):
                    yield offset + m.start("path"), offset + m.end("path"), path
        offset += len(line)
