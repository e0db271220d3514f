#!/usr/bin/env bash
# Real-repo check for the binding classes (fallbacks, dead gates, rebinding, probes).
# Usage: benchmarks/bindings_check.sh <repo-dir> <out-prefix>
# Runs `porter apply --dry-run` (safe, then --unsafe-fixes) on a git work tree prepared by the
# caller, applies each diff to a scratch copy, and checks that every changed Python file compiles
# and that ruff's F821/F401/F811 findings on it are no more than on the original file. Nothing in
# the target repository is executed. PORTER and PYTHON name the executables to use.
set -u
repo=$1; out=$2
porter=${PORTER:-porter}; python=${PYTHON:-python}
for mode in safe unsafe; do
  flag=""; [ "$mode" = unsafe ] && flag="--unsafe-fixes"
  (cd "$repo" && $porter apply --dry-run --no-cache $flag . > "$out.$mode.diff" 2> "$out.$mode.err")
  scratch=$(mktemp -d); git -C "$repo" archive HEAD | tar -x -C "$scratch"
  if [ -s "$out.$mode.diff" ]; then (cd "$scratch" && git apply --whitespace=nowarn "$out.$mode.diff" 2>>"$out.$mode.err"); fi
  files=$(grep '^+++ b/' "$out.$mode.diff" | sed 's|^+++ b/||' | grep '\.py$' || true)
  {
    echo "files changed: $(echo "$files" | grep -c . )"
    for f in $files; do
      [ -f "$scratch/$f" ] || continue
      $python -m py_compile "$scratch/$f" 2>/dev/null || echo "COMPILE FAIL $f"
      old=$(cd "$repo" && $python -m ruff check --no-cache --isolated --select F821,F401,F811 --output-format concise "$f" 2>/dev/null | grep -c ":[0-9]*:[0-9]*:")
      new=$(cd "$scratch" && $python -m ruff check --no-cache --isolated --select F821,F401,F811 --output-format concise "$f" 2>/dev/null | grep ":[0-9]*:[0-9]*:")
      n=$(echo "$new" | grep -c . )
      echo "$f ruff F821/F401/F811: original $old, ported $n"
      [ "$n" -gt "$old" ] && echo "$new" | sed 's/^/    /'
    done
  } > "$out.$mode.check"
  rm -rf "$scratch"
done
