"""Issue 17 item 17 (setup.py globs stay inside the root) and issue 12 item 5 (HIPify never renames a
source that build code names), plus the include-path sibling (a quoted ``#include`` of an absolute or
out-of-root path must not pull a host file into HIPify, whose output porter would write back)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _helpers import porter  # noqa: E402

from porter.hipify_wrappers import included_headers, run_hipify  # noqa: E402
from porter.hipify_wrappers.setup_scan import scan_setup  # noqa: E402

KERNEL = "#include <cuda_runtime.h>\nvoid sync_all() { cudaDeviceSynchronize(); }\n"


@pytest.fixture
def fenced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fail the test if anything lists a folder outside ``tmp_path``."""
    real = os.scandir
    fence = os.path.realpath(tmp_path)

    def scandir(path: object = ".") -> object:
        full = os.path.realpath(os.fspath(path))  # type: ignore[arg-type]
        assert full == fence or full.startswith(fence + os.sep), f"listed {full} outside the root"
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    return tmp_path


def test_setup_globs_never_leave_the_root(fenced: Path) -> None:
    root = fenced / "proj"
    (root / "csrc" / "sub").mkdir(parents=True)
    (root / "csrc" / "a.cu").write_text(KERNEL)
    (root / "csrc" / "sub" / "b.cu").write_text(KERNEL)
    (root / "csrc" / "hostlink").symlink_to("/usr")  # a symlinked folder is never walked
    (root / "setup.py").write_text(textwrap.dedent("""\
        import glob
        from torch.utils.cpp_extension import CUDAExtension
        CUDAExtension("etc", sources=glob.glob("/etc/*"))
        CUDAExtension("usr", sources=glob.glob("/usr/**/*", recursive=True))
        CUDAExtension("up", sources=glob.glob("../../*"))
        CUDAExtension("home", sources=glob.glob("~/*"))
        CUDAExtension("link", sources=glob.glob("csrc/hostlink/**/*.h", recursive=True))
        CUDAExtension("ok", sources=glob.glob("csrc/**/*.cu", recursive=True))
        CUDAExtension("flat", sources=glob.glob("csrc/*.cu"))
        CUDAExtension("abs", sources=["/etc/passwd", "../outside.cu", "csrc/a.cu"])
    """))
    exts, findings = scan_setup(root)
    by_name = {e.name: e for e in exts}
    for name in ("etc", "usr", "up", "home"):
        assert not by_name[name].resolved and by_name[name].sources == [], name
    assert by_name["link"].sources == []
    assert by_name["ok"].sources == ["csrc/a.cu", "csrc/sub/b.cu"]
    assert by_name["flat"].sources == ["csrc/a.cu"]
    assert by_name["abs"].sources == ["csrc/a.cu"]
    assert {f.code for f in findings} == {"PRT563", "PRT566"}


def test_glob_in_root_matches_like_glob(tmp_path: Path) -> None:
    from porter.hipify_wrappers.setup_scan import glob_in_root

    root = tmp_path / "p"
    (root / "x" / "y").mkdir(parents=True)
    for rel in ("x/a.cu", "x/y/b.cu", "x/.hidden.cu", "x/y/c.cpp", "top.cu"):
        (root / rel).write_text("")
    assert glob_in_root(root, "", "x/**/*.cu", recursive=True) == ["x/a.cu", "x/y/b.cu"]
    assert glob_in_root(root, "", "x/**/*.cu") == ["x/y/b.cu"]  # without recursive, ** is *
    assert glob_in_root(root, "x", "*.cu") == ["x/a.cu"]
    assert glob_in_root(root, "x", "../*.cu") == ["top.cu"]
    assert glob_in_root(root, "x", "../../*.cu") is None


@pytest.mark.slow
def test_migrate_survives_hostile_setup_globs(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the setup.py scan runs with the torch.utils.hipify engine")
    root = tmp_path / "proj"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "k.cu").write_text(KERNEL)
    (root / "setup.py").write_text(
        "import glob\nfrom torch.utils.cpp_extension import CUDAExtension\n"
        "CUDAExtension('a', sources=glob.glob('/etc/*'))\n")
    proc = porter("migrate", "--dry-run", "--hipify", "torch", ".", cwd=root)
    assert proc.returncode in (0, 1), proc.stderr
    assert "internal error" not in proc.stderr


def test_absolute_include_does_not_pull_host_files(tmp_path: Path) -> None:
    outside = tmp_path / "host" / "evil.cuh"
    outside.parent.mkdir()
    outside.write_text(KERNEL)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "link.cuh").symlink_to(outside)
    (root / "k.cu").write_text(f'#include "{outside}"\n#include "../host/evil.cuh"\n#include "link.cuh"\n'
                               + KERNEL)
    assert included_headers(root, ["k.cu"]) == ["k.cu"]


# -- issue 12 item 5: sources named by build code are not renamed ----------------------------------

JIT = textwrap.dedent("""\
    from pathlib import Path
    from torch.utils.cpp_extension import load

    srcpath = Path(__file__).parent / "csrc"
    _ext = load(name="fused_k", sources=[srcpath / "k_cuda.cu", srcpath / "k.cpp"], verbose=False)
""")
INLINE = textwrap.dedent("""\
    import os
    from torch.utils import cpp_extension
    here = os.path.dirname(__file__)
    SRC = open(os.path.join(here, "csrc", "inline_cuda.cu")).read()
    mod = cpp_extension.load_inline("inl", cpp_sources="", cuda_sources=[SRC])
""")
CMAKE = "project(x LANGUAGES CXX CUDA)\nadd_library(ops SHARED ops/cmake_k.cu ops/helper.cpp)  # ops\n"
MAKEFILE = "all: make_k.o\nmake_k.o: make_k.cu\n\tnvcc -c make_k.cu -o make_k.o\n"


def _jit_project(tmp: Path) -> Path:
    root = tmp / "proj"
    files = {
        "pkg/ops.py": JIT, "pkg/csrc/k_cuda.cu": KERNEL, "pkg/csrc/k.cpp": "int k() { return 0; }\n",
        "pkg/inline.py": INLINE, "pkg/csrc/inline_cuda.cu": KERNEL,
        "CMakeLists.txt": CMAKE, "ops/cmake_k.cu": KERNEL,
        "native/Makefile": MAKEFILE, "native/make_k.cu": KERNEL,
        "free/standalone.cu": KERNEL,
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.slow
def test_build_named_sources_are_left_to_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="torch.utils.hipify needs torch")
    root = _jit_project(tmp_path)
    keep = [p for p in os.environ["PATH"].split(os.pathsep) if p and not any(
        os.path.exists(os.path.join(p, t)) for t in ("hipify-perl", "hipify-clang"))]
    monkeypatch.setenv("PATH", os.pathsep.join(keep))
    named = ["pkg/csrc/k_cuda.cu", "pkg/csrc/inline_cuda.cu", "ops/cmake_k.cu", "native/make_k.cu"]
    res = run_hipify(root, [*named, "free/standalone.cu"], engine="torch")
    touched = {c.path for c in res.changes}
    assert not touched & set(named), sorted(touched)
    assert "free/standalone.cu" in touched  # an unreferenced source is still converted (renamed)
    assert sorted(res.skipped) == sorted(named)
    sites = {(f.path, f.line) for f in res.findings if f.code == "PRT563"}
    assert {("pkg/ops.py", 5), ("pkg/inline.py", 5), ("CMakeLists.txt", 2), ("native/Makefile", 2)} <= sites


def test_hipify_scratch_copy_follows_no_symlinked_folder(tmp_path: Path) -> None:
    from porter.hipify_wrappers.base import copy_sources

    host = tmp_path / "host"
    host.mkdir()
    (host / "x.cuh").write_text(KERNEL)
    root = tmp_path / "proj"
    root.mkdir()
    (root / "k.cu").write_text(KERNEL)
    (root / "inc").symlink_to(host)
    assert copy_sources(root, tmp_path / "dest", ["k.cu"]) == ["k.cu"]
    assert not (tmp_path / "dest" / "inc").exists()
