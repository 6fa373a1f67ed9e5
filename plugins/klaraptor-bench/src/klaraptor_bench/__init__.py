"""klaraptor's evaluation against exhaustive search (DESIGN.md "How we judge a choice"), a
plug-in of the `klaraptor` command (`klaraptor bench ...`, entry point `klaraptor.plugins` /
`bench`: `plugin`). It is research, not product: the `klaraptor` wheel does not ship it and
never imports it.

- `cli`: the `klaraptor bench` subcommands;
- `truth`: GPU collection of the suite's exhaustive ground truth, with documented per-size
  budgets (the training points: the product's `klaraptor.suite.protocol`);
- `dataset`: writing the recorded dataset from a store and adding to it (reading it is the
  product's `klaraptor.suite.recorded`);
- `evaluate`: the methods side by side (klaraptor, online top-k, default block, OCC, tune-once,
  exhaustive) and their scores; `report`: summary JSON, Table 6.1/6.2-style Markdown and the
  plots; `supplement`: measurements added after a dataset shipped;
- `saake_*` and `referee`: SAAKE's Table 1, search and bottlenecks, judged by the counters;
- `snowpack_*`: SNOWPACK's evaluation and the paper's protocol.
"""
