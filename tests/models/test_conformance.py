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
