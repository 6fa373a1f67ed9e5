"""The evaluation as a plug-in (`klaraptor.cli.plugins`): found through its entry point, or by
module name from a checkout; where it is absent, `klaraptor bench` and the recorded demo say how
to install it (exit code 2), and a plug-in whose own dependency is missing is not mistaken for
an absent one."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest

from klaraptor.cli import main
from klaraptor.cli import plugins as P
from klaraptor.core.errors import PluginMissingError


@pytest.fixture
def no_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine with the klaraptor wheel only: no entry point, no importable module."""
    monkeypatch.setattr(P.metadata, "entry_points", lambda **kw: [])
    monkeypatch.setitem(P.FALLBACK_MODULES, P.BENCH, "klaraptor_bench_absent_for_the_test.plugin")


def test_the_plugin_is_found_through_its_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = metadata.EntryPoint(
        name=P.BENCH, value="klaraptor_bench.plugin", group=P.ENTRY_POINT_GROUP
    )
    seen: dict[str, object] = {}

    def entry_points(**kw: object) -> list[metadata.EntryPoint]:
        seen.update(kw)
        return [ep]

    monkeypatch.setattr(P.metadata, "entry_points", entry_points)
    monkeypatch.setitem(P.FALLBACK_MODULES, P.BENCH, "klaraptor_bench_absent_for_the_test.plugin")
    plugin = P.load_plugin(P.BENCH)
    assert seen == {"group": "klaraptor.plugins", "name": "bench"}
    assert plugin is not None and plugin.__name__ == "klaraptor_bench.plugin"
    for name in ("add_parser", "evaluate_recorded", "format_summary"):  # BenchPlugin
        assert callable(getattr(plugin, name)), name


def test_without_an_installation_the_checkout_module_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(P.metadata, "entry_points", lambda **kw: [])
    plugin = P.load_plugin(P.BENCH)
    assert plugin is not None and plugin.__name__ == "klaraptor_bench.plugin"


@pytest.mark.usefixtures("no_plugin")
def test_bench_without_the_plugin_says_how_to_install_it(capsys: pytest.CaptureFixture) -> None:
    assert P.load_plugin(P.BENCH) is None
    rc = main(["bench", "report", "--recorded", "--out", "/nonexistent/never-written"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2, err
    assert "klaraptor bench" in err and "pip install -e plugins/klaraptor-bench" in err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    assert "pip install -e plugins/klaraptor-bench" in " ".join(capsys.readouterr().out.split())


@pytest.mark.usefixtures("no_plugin")
def test_the_recorded_demo_without_the_plugin_says_how_to_install_it(
    capsys: pytest.CaptureFixture,
) -> None:
    rc = main(["demo", "--recorded"])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and "klaraptor demo" in err and "plugins/klaraptor-bench" in err, err
    with pytest.raises(PluginMissingError, match="not installed"):
        P.bench_plugin("the test")


def test_a_missing_dependency_inside_the_plugin_is_not_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_bench_plugin_for_the_test.py").write_text(
        "import a_dependency_nobody_installed_xyz\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(P.metadata, "entry_points", lambda **kw: [])
    monkeypatch.setitem(P.FALLBACK_MODULES, P.BENCH, "broken_bench_plugin_for_the_test")
    try:
        with pytest.raises(ModuleNotFoundError, match="a_dependency_nobody_installed_xyz"):
            P.load_plugin(P.BENCH)
    finally:
        sys.modules.pop("broken_bench_plugin_for_the_test", None)


def test_the_entry_point_and_the_checkout_fallback_name_the_same_module() -> None:
    import tomllib

    config = Path(__file__).parents[2] / "plugins" / "klaraptor-bench" / "pyproject.toml"
    if not config.exists():
        pytest.skip("klaraptor is installed, not a checkout")
    declared = tomllib.loads(config.read_text())["project"]["entry-points"][P.ENTRY_POINT_GROUP]
    assert declared == {P.BENCH: P.FALLBACK_MODULES[P.BENCH]}
