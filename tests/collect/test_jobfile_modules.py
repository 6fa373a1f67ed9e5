"""A job names the folders of the user's modules that its spec refers to, so the worker can
import them even when the folder left sys.path after the import (the C++ dispatch example's GPU
test imported its spec that way, and its worker failed with ModuleNotFoundError on the H200)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from klaraptor.collect.jobfile import imports_main, module_roots, pickled_modules, write_job
from klaraptor.collect.process import worker_env


def _import_and_forget(folder: Path, name: str):  # noqa: ANN202 - a module object
    sys.path.insert(0, str(folder))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(folder))
        # The module stays imported (sys.modules), as in the example's test.


def test_a_spec_module_whose_folder_left_sys_path_travels(tmp_path: Path) -> None:
    user = tmp_path / "user_code"
    user.mkdir()
    (user / "kp_user_spec_mod.py").write_text(
        textwrap.dedent(
            """
            def make_args(n):
                return ("made", n)
            """
        )
    )
    mod = _import_and_forget(user, "kp_user_spec_mod")
    job = tmp_path / "job.pkl"
    write_job(job, mode="time", spec=mod.make_args, points=[], options=None, events=tmp_path / "e")
    import pickle

    with open(job, "rb") as fh:
        header = pickle.load(fh)
    assert str(user.resolve()) in header["sys_path"]
    # A fresh interpreter, as the worker is, reads the job back and calls the function.
    code = textwrap.dedent(
        f"""
        from klaraptor.collect.jobfile import read_header, read_body
        with open({str(job)!r}, "rb") as fh:
            h = read_header(fh)
            j = read_body(fh, h)
        print(j.spec(3))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=worker_env(), timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "('made', 3)" in out.stdout


def test_modules_named_by_reference_only() -> None:
    import json as some_module
    import pickle

    body = pickle.dumps((some_module.dumps, "__main__"))
    assert "json" in pickled_modules(body)
    assert not imports_main(body)  # "__main__" as data only
    assert module_roots(b"not a pickle") == []
