"""SIGKILL during `porter apply` never leaves a partial file (issue 9)."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

SRC = (
    "from transformers import AutoModel\n"
    "# padding {i}\n" + "x = {i}\n" * 200 +
    'm = AutoModel.from_pretrained("m{i}", attn_implementation="flash_attention_2")\n'
)


def _variants(i: int) -> tuple[str, bytes]:
    text = SRC.format(i=i)
    kind = i % 4
    if kind == 0:
        return "plain", text.encode()
    if kind == 1:
        return "crlf", text.replace("\n", "\r\n").encode()
    if kind == 2:
        return "bom", b"\xef\xbb\xbf" + text.encode()
    return "latin1", ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + text).encode("latin-1")


def _expected(data: bytes) -> bytes:
    return data.replace(b"flash_attention_2", b"sdpa")


def test_sigkill_never_leaves_partial_files(tmp_path: Path) -> None:
    rng = random.Random(1234)
    root = tmp_path / "tree"
    root.mkdir()
    originals: dict[Path, bytes] = {}
    for i in range(400):
        sub = root / f"pkg{i % 10}"
        sub.mkdir(exist_ok=True)
        _, data = _variants(i)
        path = sub / f"m{i}.py"
        path.write_bytes(data)
        os.chmod(path, 0o640 if i % 2 else 0o755)
        originals[path] = data
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kills = 0
    for _attempt in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-m", "porter", "apply", "--no-cache", "-j", "2", str(root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        )
        time.sleep(rng.uniform(0.3, 2.5))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        for path, data in originals.items():
            now = path.read_bytes()
            assert now in (data, _expected(data)), f"{path} is neither original nor fully fixed"
            mode = os.stat(path).st_mode & 0o777
            assert mode == (0o640 if int(path.stem[1:]) % 2 else 0o755)
        leftovers = [p for p in root.rglob(".porter-*.tmp")]
        # a killed run may leave its temp file behind, but never a half-written target
        for p in leftovers:
            p.unlink()
    # a final uninterrupted run completes everything
    done = subprocess.run([sys.executable, "-m", "porter", "apply", "--no-cache", str(root)],
                          capture_output=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    for path, data in originals.items():
        assert path.read_bytes() == _expected(data)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(originals))).hexdigest()
    assert digest  # the whole tree was readable after all the kills
    assert kills >= 1, "the test never managed to interrupt a run; make the tree larger"
