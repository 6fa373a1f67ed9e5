"""The model conformance checks every registered model must pass (like scikit-learn's
`check_estimator`): the declared contract of `klaraptor.models.base`, and a real build on a
`HelperJob` whose helper predicts, chooses, serialises and exports.

    from klaraptor.models.checks import check_model
    check_model("my_model", job)      # raises ModelCheckError naming the broken rule
"""

from __future__ import annotations

import json
import math

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import BLOCK_VARS
from klaraptor.fit.training import hardware_inputs
from klaraptor.helper.program import HelperProgram
from klaraptor.models import get_model
from klaraptor.models.base import KERNEL_QUANTITIES, HelperJob, Model, ModelTags, TemplateModel
from klaraptor.program import Program


class ModelCheckError(KlaraptorError):
    """A model breaks the model contract."""


def _fail(name: str, rule: str) -> ModelCheckError:
    return ModelCheckError(f"model {name!r}: {rule}")


def check_declarations(name: str, model: Model) -> None:
    """The class attributes every model declares, with the right types."""
    if not isinstance(model, Model):
        raise _fail(name, f"is a {type(model).__name__}, not a klaraptor.models.Model")
    if model.name != name:
        raise _fail(name, f"declares name {model.name!r}, but is registered as {name!r}")
    tags = getattr(type(model), "tags", None)
    if not isinstance(tags, ModelTags):
        raise _fail(name, "must declare its capabilities as `tags`, a ModelTags class attribute")
    if tags.auto_rank is not None and not (isinstance(tags.auto_rank, int) and tags.auto_rank >= 0):
        raise _fail(name, f"auto_rank must be a non-negative int or None, got {tags.auto_rank!r}")
    if not tags.needs_measurements and type(model).static_job is Model.static_job:
        raise _fail(name, "needs no measurements, so it must implement `static_job`")
    if tags.ranks_without_measuring and type(model).rank is Model.rank:
        raise _fail(name, "is tagged ranks_without_measuring, so it must implement `rank`")
    if isinstance(model, TemplateModel):
        _check_template(name, model)


def _check_template(name: str, model: TemplateModel) -> None:
    metrics = getattr(type(model), "metrics", None)
    if not (isinstance(metrics, tuple) and metrics and all(m.isidentifier() for m in metrics)):
        raise _fail(name, f"`metrics` must be a non-empty tuple of identifiers, got {metrics!r}")
    hardware = getattr(type(model), "hardware", None)
    if not (isinstance(hardware, tuple) and all(isinstance(h, str) for h in hardware)):
        raise _fail(name, f"`hardware` must be a tuple of names, got {hardware!r}")
    degrees = model.fit_degrees
    if degrees is not None and not (
        isinstance(degrees, tuple)
        and len(degrees) == 2
        and all(isinstance(d, int) for d in degrees)
    ):
        raise _fail(
            name, f"`fit_degrees` must be None or (numerator, denominator), got {degrees!r}"
        )
    inputs = ("N", *BLOCK_VARS, "cfg")
    prog = model.program(inputs)
    if not isinstance(prog, Program):
        raise _fail(name, f"program() must return a Program, got {type(prog).__name__}")
    unknown = set(prog.unbound_calls()) - set(metrics) - set(KERNEL_QUANTITIES)
    if unknown:
        raise _fail(name, f"its template calls {sorted(unknown)}, which are neither metrics nor "
                    f"exact quantities {KERNEL_QUANTITIES}")  # fmt: skip
    extra = set(prog.inputs) - set(inputs) - set(hardware)
    if extra:
        raise _fail(name, f"its template reads undeclared inputs {sorted(extra)}")


def check_model(name: str, job: HelperJob) -> HelperProgram:
    """Run every check on the model registered as `name` with `job`; returns its helper."""
    model = get_model(name)
    check_declarations(name, model)
    if isinstance(model, TemplateModel):
        missing = set(model.hardware) - set(hardware_inputs(job.profile, allow_missing=True))
        if missing:
            raise _fail(
                name, f"reads hardware inputs no device profile provides: {sorted(missing)}"
            )
    result = model.make_helper(job)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise _fail(name, "make_helper must return (HelperProgram, report)")
    helper, report = result
    if not isinstance(helper, HelperProgram):
        raise _fail(name, f"make_helper returned a {type(helper).__name__}, not a HelperProgram")
    if helper.model_name != name or helper.kernel != job.spec.name:
        raise _fail(name, f"its helper is labelled {helper.model_name!r} for {helper.kernel!r}")
    if tuple(helper.candidates) != tuple(job.candidates):
        raise _fail(name, "its helper must keep the job's candidates, in their order")
    try:
        json.dumps(report)
    except (TypeError, ValueError) as exc:
        raise _fail(name, f"its report is not JSON-serialisable ({exc})") from None
    for D in job.train.sizes():
        pred = helper.predict(D)
        if not pred.valid.any():
            raise _fail(name, f"predicts no finite positive time for any block at {D}")
        top, ms, grid = helper.choose(D, 4)
        if [int(i) for i in pred.order[: len(top)]] != top or not all(math.isfinite(t) for t in ms):
            raise _fail(name, f"choose() and predict() disagree at {D}")
        again = HelperProgram.from_dict(json.loads(json.dumps(helper.to_dict())))
        if again.choose(D, 4) != (top, ms, grid):
            raise _fail(name, f"its helper does not survive to_dict/from_dict at {D}")
    if "klaraptor_" not in helper.to_c_header() or "def best(D)" not in helper.to_python_module():
        raise _fail(name, "its helper cannot be exported as C and Python")
    twice, _ = model.make_helper(job)
    D = job.train.sizes()[-1]
    if not np.array_equal(twice.predict(D).ms, helper.predict(D).ms, equal_nan=True):
        raise _fail(name, "make_helper is not deterministic")
    return helper


__all__ = ["ModelCheckError", "check_declarations", "check_model"]
