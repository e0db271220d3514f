"""Map a file path to the language porter analyses it as."""

from __future__ import annotations

import posixpath

PYTHON = "python"
CUDA = "cuda"  # CUDA, HIP, C and C++ sources and headers (tree-sitter CUDA grammar)
REQUIREMENTS = "requirements"
PYPROJECT = "pyproject"
SETUP_CFG = "setup-cfg"
CONDA = "conda"
DOCKERFILE = "dockerfile"
SHELL = "shell"
YAML = "yaml"  # CI configuration and launch configs

ALL = (PYTHON, CUDA, REQUIREMENTS, PYPROJECT, SETUP_CFG, CONDA, DOCKERFILE, SHELL, YAML)

_CUDA_EXT = {".cu", ".cuh", ".hip", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".inl"}
_PY_EXT = {".py", ".pyi"}
_SHELL_EXT = {".sh", ".bash", ".zsh", ".slurm", ".sbatch"}
_YAML_EXT = {".yml", ".yaml"}
_REQ_DIRS = {"requirements", "reqs", "requirements.d"}


def detect(relpath: str) -> str | None:
    """Return the language of ``relpath`` ('/'-separated), or None when porter ignores it."""
    name = posixpath.basename(relpath)
    lower = name.lower()
    stem, ext = posixpath.splitext(lower)
    if ext in _PY_EXT:
        return PYTHON
    if ext in _CUDA_EXT:
        return CUDA
    if lower == "pyproject.toml":
        return PYPROJECT
    if lower == "setup.cfg":
        return SETUP_CFG
    if ext in {".txt", ".in"} and (
        "requirements" in stem or "constraints" in stem or stem.startswith("requires")
        or posixpath.basename(posixpath.dirname(relpath)).lower() in _REQ_DIRS
    ):
        return REQUIREMENTS
    if lower in {"environment.yml", "environment.yaml", "conda.yml", "conda.yaml"} or (
        ext in _YAML_EXT and stem.startswith("environment")
    ):
        return CONDA
    if lower == "dockerfile" or lower.startswith("dockerfile.") or ext == ".dockerfile" or lower == "containerfile":
        return DOCKERFILE
    if ext in _SHELL_EXT:
        return SHELL
    if ext in _YAML_EXT:
        return YAML
    return None
