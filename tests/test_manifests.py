"""porter.manifests: pins across manifests and lock files, manifest detection, scanners."""

from __future__ import annotations

import json

import pytest

from porter.manifests import (
    collect_pins,
    conda_constraint,
    is_manifest,
    poetry_constraint,
    requirement_lines,
    toml_strings,
)


@pytest.mark.parametrize("path", ["requirements.txt", "requirements/gpu.txt", "requirements-dev.in",
                                  "constraints.txt", "pyproject.toml", "sub/setup.py", "setup.cfg",
                                  "environment.yml", "poetry.lock", "uv.lock", "Pipfile.lock", "pdm.lock"])
def test_is_manifest(path: str) -> None:
    assert is_manifest(path)


@pytest.mark.parametrize("path", ["train.py", "README.md", "setup_utils.py", "notes.txt", "config.yaml"])
def test_is_not_manifest(path: str) -> None:
    assert not is_manifest(path)


def test_collect_pins_every_format() -> None:
    files = {
        "requirements.txt": "torch==2.1.0+cu121 \\\n  --hash=sha256:ab  # c\n-i https://x\nEinops>=0.6\n",
        "pyproject.toml": '[project]\nname = "x"\ndependencies = ["xformers>=0.0.22", "numpy"]\n'
                          '[tool.poetry.dependencies]\npython = "^3.10"\nsafetensors = "^0.4.1"\n'
                          'apex = {version = "~0.1", optional = true}\n',
        "setup.py": "from setuptools import setup\nREQS = ['deepspeed>=0.12']\n"
                    "setup(install_requires=REQS, extras_require={'q': ['bitsandbytes==0.41.1']})\n",
        "setup.cfg": "[options]\ninstall_requires =\n    accelerate>=0.25  # x\n",
        "environment.yml": "dependencies:\n  - pytorch=2.1\n  - pip:\n    - triton==2.1.0\n",
    }
    pins = collect_pins(files)
    assert pins["torch"] == "==2.1.0+cu121"
    assert pins["einops"] == ">=0.6"
    assert pins["xformers"] == ">=0.0.22" and pins["numpy"] == ""
    assert pins["safetensors"] == "<0.5,>=0.4.1"
    assert pins["apex"] == "<0.2,>=0.1"
    assert pins["deepspeed"] == ">=0.12" and pins["bitsandbytes"] == "==0.41.1"
    assert pins["accelerate"] == ">=0.25" and pins["triton"] == "==2.1.0"
    assert "python" not in pins


def test_lock_files_win_and_pin_exactly() -> None:
    files = {
        "requirements.txt": "flash-attn>=2.0\n",
        "poetry.lock": '[[package]]\nname = "Flash_Attn"\nversion = "2.0.4"\n',
        "uv.lock": '[[package]]\nname = "torch"\nversion = "2.5.1"\n',
        "Pipfile.lock": json.dumps({"default": {"xformers": {"version": "==0.0.23"}}}),
        "pdm.lock": '[[package]]\nname = "einops"\nversion = "0.7.0"\n',
    }
    assert collect_pins(files) == {"einops": "==0.7.0", "flash-attn": "==2.0.4", "torch": "==2.5.1",
                                   "xformers": "==0.0.23"}


def test_exact_pin_beats_range_and_url_wheels_give_versions() -> None:
    files = {
        "a/requirements.txt": "flash-attn==2.3.6\n",
        "requirements.txt": "flash-attn>=2\n",
        "b/requirements.txt": "xformers @ https://example.org/xformers-0.0.23%2Bcu121-cp310-cp310-linux_x86_64.whl\n",
    }
    pins = collect_pins(files)
    assert pins["flash-attn"] == "==2.3.6"
    assert pins["xformers"] == "==0.0.23"


def test_broken_files_are_skipped_and_setup_py_never_executed(tmp_path) -> None:
    marker = tmp_path / "ran"
    files = {
        "pyproject.toml": "[project\n",
        "setup.py": f"open({str(marker)!r}, 'w')\nfrom setuptools import setup\nsetup(install_requires=['a'])\n",
        "environment.yml": ": : :\n",
        "Pipfile.lock": "{",
        "requirements.txt": "not a valid requirement ===\nb\n",
    }
    assert collect_pins(files) == {"a": "", "b": ""}
    assert not marker.exists()


def test_constraint_conversions() -> None:
    assert poetry_constraint("^2.5.8") == "<3,>=2.5.8"
    assert poetry_constraint("^0.4") == "<0.5,>=0.4"
    assert poetry_constraint("2.0.4") == "==2.0.4"
    assert poetry_constraint("*") == ""
    assert poetry_constraint(">=1,<2") == "<2,>=1"
    assert conda_constraint("=2.1") == "==2.1.*"
    assert conda_constraint("==2.1.0") == "==2.1.0"
    assert conda_constraint(">=1.0") == ">=1.0"


def test_requirement_lines_offsets() -> None:
    text = "# top\ntorch==2.1.0  # c\n--extra-index-url=https://x/y\n\n-r other.txt\n"
    lines = requirement_lines(text)
    req = next(ln for ln in lines if ln.requirement)
    assert text[req.req_start : req.req_end] == "torch==2.1.0"
    opt = next(ln for ln in lines if ln.option == "--extra-index-url")
    assert text[opt.value_start : opt.value_end] == "https://x/y"
    assert "".join(text[ln.start : ln.end] for ln in lines) == text


def test_toml_strings_tables_keys_and_offsets() -> None:
    text = ('[project]\ndependencies = [\n  "a",  # "not a string"\n  \'b\',\n]\n'
            '[tool.poetry.dependencies]\nc = { version = "^1", source = "s" }\n'
            'd = """\nmulti\n"""\n')
    got = [(s.table, s.key, s.value, s.in_array, s.inline_key) for s in toml_strings(text)]
    assert got == [("project", "dependencies", "a", True, ""), ("project", "dependencies", "b", True, ""),
                   ("tool.poetry.dependencies", "c", "^1", False, "version"),
                   ("tool.poetry.dependencies", "c", "s", False, "source")]
    for s in toml_strings(text):
        assert text[s.start + 1 : s.end - 1] == s.value


def test_pipfile() -> None:
    text = '[packages]\ntorch = "==2.5.1"\nnumpy = "*"\nxformers = {version = ">=0.0.23", index = "pytorch"}\n'
    assert collect_pins({"Pipfile": text}) == {"numpy": "", "torch": "==2.5.1", "xformers": ">=0.0.23"}


def test_build_requirements_yield_to_runtime_pins() -> None:
    """``[build-system].requires`` is the build environment, not what the package runs with: a runtime pin of the
    same distribution (``install_requires``, ``[project].dependencies``, requirements files) wins even though
    pyproject.toml sorts first; a build requirement still counts where nothing else versions the distribution."""
    files = {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools", "torch>=1.10", "cython>=0.29", "numpy"]\n',
        "setup.py": "from setuptools import setup\nsetup(install_requires=['torch>=1.13', 'numpy>=1.21'])\n",
    }
    pins = collect_pins(files)
    assert pins["torch"] == ">=1.13" and pins["numpy"] == ">=1.21"
    assert pins["cython"] == ">=0.29"  # only the build names it
    only_build = collect_pins({"pyproject.toml": '[build-system]\nrequires = ["torch>=2.1"]\n',
                               "requirements.txt": "torch\n"})
    assert only_build["torch"] == ">=2.1"  # a runtime name without a version says less
