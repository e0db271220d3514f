#!/usr/bin/env bash
# Real-repo check for the binding classes (fallbacks, dead gates, rebinding, probes).
# Usage: benchmarks/bindings_check.sh <repo-dir> <out-prefix>
# Runs `porter apply --dry-run` (safe, then --unsafe-fixes) on a git work tree prepared by the
# caller, applies each diff to a scratch copy, and checks every changed Python file compiles and
# resolves its names (ruff F821/F401/F811). Nothing in the target repository is executed.
set -u
repo=$1; out=$2
porter=${PORTER:-porter}; python=${PYTHON:-python}
for mode in safe unsafe; do
  flag=""; [ "$mode" = unsafe ] && flag="--unsafe-fixes"
  (cd "$repo" && $porter apply --dry-run --no-cache $flag . > "$out.$mode.diff" 2> "$out.$mode.err")
  scratch=$(mktemp -d); git -C "$repo" archive HEAD | tar -x -C "$scratch"
  (cd "$scratch" && git apply --whitespace=nowarn "$out.$mode.diff" 2>>"$out.$mode.err")
  files=$(grep '^+++ b/' "$out.$mode.diff" | sed 's|^+++ b/||' | grep '\.py$' || true)
  {
    echo "files changed: $(echo "$files" | grep -c . )"
    for f in $files; do [ -f "$scratch/$f" ] && $python -m py_compile "$scratch/$f" || echo "COMPILE FAIL $f"; done
    [ -n "$files" ] && (cd "$scratch" && $python -m ruff check --no-cache --isolated --select F821,F401,F811 $files 2>&1 | tail -15)
  } > "$out.$mode.check"
  rm -rf "$scratch"
done
