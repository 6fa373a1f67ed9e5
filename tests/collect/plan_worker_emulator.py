"""A stand-in for `python -m klaraptor.collect.worker JOB` in mode plan, for CPU tests of
`collect_plan`: it reads the real job file and runs the real plan loop
(`klaraptor.collect.worker.plan_loop`), answering each point from a JSON table of recorded times
instead of a GPU launch. Environment: KLARAPTOR_TEST_TIMES (the table: [[D, block, cold, ms]]),
KLARAPTOR_TEST_CRASH (optional "<point id>:<flag file>": die on that point once, as a lost CUDA
context would, leaving the flag file so the replacement worker goes on)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(job_path: str) -> int:
    from klaraptor.collect.jobfile import read_body, read_header
    from klaraptor.collect.process import EXIT_OK, Events
    from klaraptor.collect.worker import plan_loop

    with open(job_path, "rb") as fh:
        header = read_header(fh)
        events = Events(header["events"])
        job = read_body(fh, header)
    table = {
        (tuple(D), tuple(b), bool(c)): float(ms)
        for D, b, c, ms in json.loads(Path(os.environ["KLARAPTOR_TEST_TIMES"]).read_text())
    }
    crash_id, _, flag = os.environ.get("KLARAPTOR_TEST_CRASH", "").partition(":")
    events.emit("ready", pid=os.getpid())

    def measure(p, since):  # noqa: ANN001, ANN202 - recorded times carry no wall
        events.emit("start", id=p.id)
        if crash_id and int(crash_id) == p.id and not Path(flag).exists():
            Path(flag).write_text("crashed once")
            os._exit(3)
        ms = table.get((p.D.values(), tuple(p.block), bool(p.cold)))
        if ms is None:
            events.emit("result", id=p.id, status="failed", value={}, reason="no recorded time")
            return "failed", {}
        value = {"median_ms": ms, "q1_ms": ms * 0.999, "q3_ms": ms * 1.001, "spread": 0.002}
        events.emit("result", id=p.id, status="ok", value=value)
        return "ok", value

    rc = plan_loop(job, events, measure)
    return rc if rc != EXIT_OK else EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[-1]))
