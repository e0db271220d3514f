"""distributed family: NCCL variables, and what must not be reported."""

from __future__ import annotations

import pytest

from codemods.distributed import NVIDIA_ONLY, RETUNE, SHARED, classify
from porter.testing import codes, findings, fixed

FAM = "distributed"


@pytest.mark.parametrize(("var", "code"), [("NCCL_DEBUG", "PRT760"), ("NCCL_SOCKET_IFNAME", "PRT760"),
                                           ("NCCL_IB_HCA", "PRT760"), ("NCCL_P2P_LEVEL", "PRT761"),
                                           ("NCCL_IB_FOO", "PRT761"), ("NCCL_NVLS_ENABLE", "PRT762"),
                                           ("NCCL_NVLS_CHUNKSIZE", "PRT762"), ("NCCL_WHATEVER", "PRT763")])
def test_classify(var: str, code: str) -> None:
    assert classify(var)[0] == code


def test_tables_do_not_overlap() -> None:
    assert not (set(SHARED) & set(RETUNE)) and not (set(SHARED) & set(NVIDIA_ONLY))
    assert not (set(RETUNE) & set(NVIDIA_ONLY))


@pytest.mark.parametrize("src", [
    'dist.init_process_group(backend="nccl")\n',
    'import os\nos.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"\n',
    '"""Set NCCL_DEBUG=INFO."""\n',
    'x = "NCCL_DEBUG is useful"\n',
    '# os.environ["NCCL_DEBUG"] = "INFO"\n',
])
def test_python_negatives(src: str) -> None:
    assert findings(src, "t.py", family=FAM) == []


def test_python_env_string_with_value() -> None:
    assert codes(findings('env = ["NCCL_ALGO=Tree"]\n', "t.py", family=FAM)) == ["PRT761"]


@pytest.mark.parametrize(("src", "path"), [
    ("export TORCH_NCCL_BLOCKING_WAIT=1\necho $NCCL_DEBUG\n# NCCL_DEBUG=INFO\n", "run.sh"),
    ("FROM x\n# ENV NCCL_DEBUG INFO\n", "Dockerfile"),
    ("env:\n  - name: TORCH_NCCL_ASYNC_ERROR_HANDLING\n  # NCCL_ALGO: Ring\n", "job.yaml"),
])
def test_text_negatives(src: str, path: str) -> None:
    assert findings(src, path, family=FAM) == []


def test_nothing_is_rewritten() -> None:
    src = "export NCCL_P2P_LEVEL=NVL\n"
    assert codes(findings(src, "run.sh", family=FAM)) == ["PRT761"]
    assert fixed(src, "run.sh", family=FAM, unsafe=True) == src


@pytest.mark.parametrize("var", ["NCCL_FASTRAK_IFNAME", "NCCL_GPUDIRECTTCPX_FORCE_ACK", "NCCL_SHIMNET_SHIM_LAYERS",
                                 "NCCL_USE_SNAP"])
def test_nvidia_cloud_plugins(var: str) -> None:
    assert classify(var)[0] == "PRT762"


def test_python_each_literal_counts_alone() -> None:
    src = ('x = "NCCL_ALGO" "=Tree"\ny = ("a" "NCCL_IB_HCA"\n     \'NCCL_NOPE\')\n'
           '\u00e9 = "\u00fc"; z = f"{env[\'NCCL_P2P_LEVEL\']}" "NCCL_BUFFSIZE"\n'
           'v = f"NCCL_DEBUG {x:{\'NCCL_MIN_CTAS\'}}"\nu = b"NCCL_DEBUG"\nt = r"""NCCL_TOPO_FILE"""\n')
    got = [(f.data["variable"], f.line, f.column, f.end_column) for f in findings(src, "t.py", family=FAM)]
    # f-string text is no literal; the literals in its fields are; bytes are not text
    assert got == [("NCCL_ALGO", 1, 6, 15), ("NCCL_IB_HCA", 2, 11, 22), ("NCCL_NOPE", 3, 7, 16),
                   ("NCCL_P2P_LEVEL", 4, 22, 36), ("NCCL_BUFFSIZE", 4, 42, 55),
                   ("NCCL_MIN_CTAS", 5, 23, 36), ("NCCL_TOPO_FILE", 7, 9, 23)]


def test_python_keyword_names() -> None:
    src = 'd = dict(NCCL_ALGO="x", **{"NCCL_NTHREADS": 1})\nclass K(metaclass=type, NCCL_X=1): pass\n'
    got = [(f.data["variable"], f.line, f.column) for f in findings(src, "t.py", family=FAM)]
    assert got == [("NCCL_ALGO", 1, 10), ("NCCL_NTHREADS", 1, 29), ("NCCL_X", 2, 25)]
