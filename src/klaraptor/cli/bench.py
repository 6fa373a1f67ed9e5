"""`klaraptor bench`: the evaluation against exhaustive search, a plug-in (`klaraptor_bench`).

The subcommands (collect, report, saake, export, train-snowpack, snowpack) are the plug-in's; this
module only finds it (`klaraptor.cli.plugins`) and, where it is absent, puts a stand-in `bench`
that says how to install it.
"""

from __future__ import annotations

from typing import Any

from klaraptor.cli.plugins import BENCH, add_missing_parser, load_plugin

HELP = "evaluation against exhaustive search (suite)"


def add_parser(sub: Any) -> None:
    plugin = load_plugin(BENCH)
    if plugin is None:
        add_missing_parser(sub, "bench", HELP, "`klaraptor bench`")
        return
    plugin.add_parser(sub)
