"""Every registered model passes the model contract's checks on real recorded data, and the
checks catch a model that breaks it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from klaraptor import suite
from klaraptor.assemble import make_job
from klaraptor.models import ModelTags, available_models, register_model
from klaraptor.models.checks import ModelCheckError, check_declarations, check_model
from klaraptor.models.time_fit import TimeFitModel

KERNEL = "polybench.atax.k1"


@pytest.fixture(scope="module")
def job(recorded, tmp_path_factory):  # noqa: ANN001, ANN201
    store = recorded.to_store(tmp_path_factory.mktemp("conf") / "s.sqlite", kernels=[KERNEL])
    spec = suite.get(KERNEL)
    yield make_job(
        spec, store, recorded.profile(), [spec.size(n) for n in spec.meta["train_sizes"]]
    )
    store.close()


@pytest.mark.parametrize("name", available_models())
def test_registered_model_conforms(name: str, job) -> None:  # noqa: ANN001
    helper = check_model(name, job)
    assert helper.model_name == name


class Undeclared(TimeFitModel):
    """A model that declares its capabilities as a dict, not as ModelTags."""

    name = "undeclared"
    tags = {"needs_counters": False}  # type: ignore[assignment]


class UnrankedPrior(TimeFitModel):
    """A model tagged as a prior that cannot rank."""

    name = "unranked_prior"
    tags = ModelTags(ranks_without_measuring=True)


class WrongMetric(TimeFitModel):
    name = "wrong_metric"

    def program(self, inputs: Sequence[str]):  # noqa: ANN201
        from klaraptor.program import Program, call

        return Program("p", inputs, [("cycles", call("no_such_metric"))], ["cycles"])


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (Undeclared, "ModelTags class attribute"),
        (UnrankedPrior, "must implement `rank`"),
        (WrongMetric, "no_such_metric"),
    ],
)
def test_the_checks_catch_a_broken_model(cls, message: str, job, monkeypatch) -> None:  # noqa: ANN001
    from klaraptor import models

    monkeypatch.setattr(models, "_FACTORIES", dict(models._FACTORIES))
    register_model(cls.name, cls)
    with pytest.raises(ModelCheckError, match=message):
        check_declarations(cls.name, cls())
    with pytest.raises(ModelCheckError, match=message):
        check_model(cls.name, job)


@pytest.mark.parametrize(
    "name", ["scaling", "mwp_cwp", "mwp_cwp_fenced", "time_fit", "saake", "snowpack"]
)
def test_builtin_tags_read_without_importing_are_the_models_own(name: str) -> None:
    # A build reads every model's tags; the registry answers for the built-ins without importing
    # them (SciPy, the emulator), so its table must be what each model declares.
    from klaraptor.models import get_model, model_tags
    from klaraptor.models.base import BUILTIN_TAGS

    assert set(BUILTIN_TAGS) <= set(available_models())
    assert model_tags(name) == get_model(name).tags


def test_reading_the_tags_of_every_model_imports_no_model() -> None:
    # In a fresh interpreter: the budget check and auto's candidates, as every build reads them,
    # leave SciPy's optimize package and the model modules unimported.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from klaraptor.models import auto_candidates, is_budgeted, priors\n"
        "assert is_budgeted('auto') and auto_candidates() and priors()\n"
        "bad = [m for m in ('scipy.optimize', 'klaraptor.models.saake.model',\n"
        "       'klaraptor.models.scaling_model', 'klaraptor.models.snowpack.model') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_registered_model_overrides_the_builtin_tags() -> None:
    from klaraptor.models import _FACTORIES, model_tags

    try:
        register_model("time_fit", lambda: TimeFitModel())
        assert model_tags("time_fit") == TimeFitModel.tags
    finally:
        _FACTORIES.pop("time_fit", None)
