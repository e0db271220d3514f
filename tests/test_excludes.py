"""The exclude matcher without pathspec (directory-name patterns such as porter's defaults) decides
exactly as pathspec's GitIgnoreSpec does; every other pattern list still goes to pathspec."""

from __future__ import annotations

import pathspec
from hypothesis import given, settings
from hypothesis import strategies as st

from porter.config import DEFAULT_EXCLUDE
from porter.excludes import DirectoryNames, compile_excludes, is_simple

NAMES = ["build", "venv", ".venv", "x.egg-info", ".egg-info", "egg-info", "a", "ab", "src", "node_modules",
         "site-packages", "dist", "buildx", "xbuild", "é", "a b", ".git", "git", "__pycache__", "a+b", "a-b", "a.b"]
SIMPLE = ["build/", "venv/", ".venv/", "*.egg-info/", "a*/", "*/", "a*b/", "x.egg-info/", "é/", "*a/", "a+b/",
          ".git/", "site-packages/", "__pycache__/", "*.*/", "a-b/"]

paths = st.builds(
    lambda prefix, parts, name: prefix + "/".join([*parts, name]),
    st.sampled_from(["", "", "", "/", "./", "//", "x\n/"]),
    st.lists(st.sampled_from(NAMES), max_size=4),
    st.sampled_from(["f.py", "k.cu", "build", "venv", "x.egg-info", "a"]),
)


def _pathspec(patterns: list[str], path: str) -> bool:
    return bool(pathspec.GitIgnoreSpec.from_lines(patterns).match_file(path))


def test_the_default_excludes_take_the_fast_path() -> None:
    assert all(is_simple(p) for p in DEFAULT_EXCLUDE)
    assert isinstance(compile_excludes(DEFAULT_EXCLUDE), DirectoryNames)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(SIMPLE + list(DEFAULT_EXCLUDE)), max_size=5), paths)
def test_directory_names_match_as_pathspec_does(patterns: list[str], path: str) -> None:
    assert compile_excludes(patterns).match_file(path) == _pathspec(patterns, path)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.from_regex(r"\A[a.*b_é+-]{1,5}/\Z"), max_size=3), st.text(alphabet="ab.*/_é -+\n\r", max_size=20))
def test_any_simple_pattern_on_any_path(patterns: list[str], path: str) -> None:
    matcher = compile_excludes(patterns)
    if all(is_simple(p) for p in patterns):
        assert isinstance(matcher, DirectoryNames)
    assert matcher.match_file(path) == _pathspec(patterns, path)


def test_other_patterns_go_to_pathspec() -> None:
    for patterns in (["*.cu"], ["build/", "!build/keep/"], ["/top/"], ["a/b/"], ["**/gen/"], ["[ab]/"],
                     ["a?/"], ["./"], ["../"], ["# comment"], ["a\\*/"], ["a**/"], ["a /"]):
        assert not isinstance(compile_excludes(patterns), DirectoryNames), patterns
    spec = compile_excludes(["build/", "!build/keep.py"])
    assert spec.match_file("build/x.py") and not spec.match_file("build/keep.py")
