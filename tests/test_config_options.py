"""Declared, validated options: every [tool.porter] key and every family option is declared once
(porter.config.SETTINGS, Family.options); typos and wrong types are config errors."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from cli_helpers import REPO, run_porter

from porter import registry
from porter.config import SETTINGS, TYPES, ConfigError, Settings, from_table, render_options
from porter.testing import settings_for


def test_top_level_typo_names_the_nearest_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown key `max-file-sise`.*did you mean `max-file-size`\?"):
        from_table({"max-file-sise": 10})


def test_unknown_family_is_an_error_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"unknown rule family `atention`.*did you mean `attention`\?"):
        from_table({"atention": {"x": 1}})


def test_family_key_typo_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown key `stratgy` in \[tool.porter.warp_size\].*`strategy`"):
        from_table({"warp_size": {"stratgy": "physical"}})
    with pytest.raises(ConfigError, match=r"unknown key `x` in \[tool.porter.kernels\].*no options"):
        from_table({"kernels": {"x": 1}})


@pytest.mark.parametrize("table, key", [
    ({"timeout": "60"}, "timeout"),
    ({"unsafe-fixes": "yes"}, "unsafe-fixes"),
    ({"jobs": -1}, "jobs"),
    ({"apex": {"fused": "no"}}, "apex.fused"),
    ({"build": {"rocm-image": 7}}, "build.rocm-image"),
    ({"warp_size": {"strategy": "phyiscal"}}, "warp_size.strategy"),
    ({"devices": "porter_device"}, "tool.porter.devices"),
])
def test_wrong_type_is_an_error_naming_the_key(table: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        from_table(table)


def test_choice_typo_suggests_the_valid_value() -> None:
    with pytest.raises(ConfigError, match=r"did you mean `physical`\?"):
        from_table({"warp_size": {"strategy": "phyiscal"}})


def test_valid_tables_still_parse() -> None:
    s = from_table({"max-file-size": 10, "per-file-ignores": {"t/*": ["PRT0"]},
                    "warp_size": {"header_dir": "inc", "strategy": "physical"}, "apex": {"fused": False}})
    assert s.max_file_size == 10 and s.per_file_ignores == (("t/*", ("PRT0",)),)
    assert s.option("warp_size", "header-dir") == "inc" and s.option("warp_size", "header_dir", None) == "inc"
    assert s.option("apex", "fused", True) is False
    assert Settings().option("apex", "fused") is True  # the declared default


def test_reading_an_undeclared_option_is_a_bug() -> None:
    with pytest.raises(LookupError, match="does not declare"):
        Settings().option("apex", "not-an-option", 1)
    with pytest.raises(LookupError):
        settings_for("devices").option("no-such-family", "x")


def test_settings_fields_are_the_declared_settings() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(Settings)}
    for opt in SETTINGS:
        assert opt.type in TYPES
        assert fields.pop(opt.attr) == opt.default, opt.key
    assert set(fields) == {"options", "source", "notes"}  # the rest is not a [tool.porter] key


def test_every_family_option_read_by_a_family_is_declared() -> None:
    read = set()
    for path in (REPO / "codemods").glob("*.py"):
        for fam, key in re.findall(r"settings\.option\((NAME|\"\w+\"), \"([\w-]+)\"", path.read_text()):
            name = path.stem if fam == "NAME" else fam.strip('"')
            read.add((name, key.replace("_", "-")))
    assert read, "the scan found no option reads"
    declared = {(f.name, o.key) for f in registry.families() for o in f.options}
    assert read <= declared, read - declared
    for f in registry.families():
        for o in f.options:
            assert o.type in TYPES and o.help, (f.name, o.key)
            if o.choices:
                assert o.default in o.choices


def test_porter_options_lists_every_declared_option() -> None:
    proc = run_porter("options")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    for opt in SETTINGS:
        assert re.search(rf"^  {re.escape(opt.key)}\s+{opt.type}", text, re.M), opt.key
    for fam in registry.families():
        if fam.options:
            assert f"[tool.porter.{fam.name}]" in text
            section = text.split(f"[tool.porter.{fam.name}]", 1)[1].split("\n[", 1)[0]
            for o in fam.options:
                assert re.search(rf"^  {re.escape(o.key)}\s+{o.type}", section, re.M), (fam.name, o.key)


def test_readme_lists_the_declared_options() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    listed = readme.split("<!-- porter options --markdown -->\n", 1)[1].split("<!-- end porter options -->", 1)[0]
    assert listed == render_options(markdown=True), "regenerate with `porter options --markdown`"


def test_config_help_lists_the_keys() -> None:
    proc = run_porter("audit", "--help")
    text = re.sub(r"-\s+", "-", " ".join(proc.stdout.decode().split()))  # click wraps after a hyphen
    assert all(opt.key in text for opt in SETTINGS)


def test_cli_reports_a_family_typo_as_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.porter.warp_size]\nheader_dri = "inc"\n')
    (tmp_path / "m.py").write_text("x = 1\n")
    proc = run_porter("audit", str(tmp_path))
    assert proc.returncode == 2
    assert b"config error" in proc.stderr and b"did you mean `header-dir`" in proc.stderr
