"""The evaluation against exhaustive search (DESIGN.md "How we judge a choice").

- `truth`: GPU collection of the suite: training points and exhaustive ground truth, with
  documented per-size budgets;
- `dataset`: the recorded dataset (real H200 measurements) shipped for the CPU tests and the demo;
- `evaluate`: the methods side by side (klaraptor, online top-k, default block, OCC, tune-once,
  exhaustive) and their scores;
- `report`: summary JSON, Table 6.1/6.2-style Markdown and the plots.
"""
