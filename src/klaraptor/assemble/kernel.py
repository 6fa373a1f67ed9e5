"""The public `Kernel`: a built kernel's selection, explanation, launching and code export."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from klaraptor.assemble.report import BuildReport
from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import Block, Config
from klaraptor.helper.program import HelperProgram
from klaraptor.runtime.selector import CandidateRow, Selection, Selector

if TYPE_CHECKING:
    from klaraptor.runtime.launcher import TunedKernel
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store


class Kernel:
    """A built kernel: `select(D)`, `explain(D)`, `tuned(*args)`, code export."""

    def __init__(
        self,
        helper: HelperProgram,
        *,
        spec: KernelSpec | None,
        store: Store | None,
        device_key: str,
        rejected: Mapping[Block | Config, str] | None = None,
        report: BuildReport | None = None,
        loader: Callable[..., Kernel] | None = None,
    ) -> None:
        self.helper = helper
        # klaraptor.build.load, given by build()/load(): select(model=...) loads other builds.
        self.loader = loader
        self.spec = spec
        self.store = store
        self.device_key = device_key
        self.report = report
        self.selector = Selector(
            helper,
            store=store,
            device_key=device_key,
            spec=spec,
            rejected=rejected,
            trained=report.sizes if report is not None else (),
        )
        self._tuned: dict[int, TunedKernel] = {}
        self._others: dict[str, Kernel] = {}

    @property
    def name(self) -> str:
        return self.helper.kernel

    def select(self, D: Any, *, model: str | None = None) -> Selection:
        """The launch configuration for D (`4096`, `(4096,)`, `{"N": 4096}`, `"N=4096"`).

        `model` chooses with another model's build of this kernel (the store's, or for a model
        that needs no measurements such as "snowpack", one made now from the spec)."""
        if model is None or model == self.helper.model_name:
            return self.selector.select(D)
        if model not in self._others:
            if self.store is None or self.loader is None:
                raise KlaraptorError(
                    f"{self.name}: select(model=...) needs a kernel from build() or load()"
                )
            self._others[model] = self.loader(
                self.name, store=self.store, device=self.device_key, model=model, spec=self.spec
            )
        return self._others[model].select(D)

    def explain(self, D: Any) -> list[CandidateRow]:
        """Every candidate's prediction for D, its rank, or why it was excluded."""
        return self.selector.explain(D)

    def tuned(self, *args: Any, stream: Any | None = None, refine: int = 0) -> None:
        """Launch with the configuration chosen for the arguments' D (see TunedKernel)."""
        self.launcher(refine=refine)(*args, stream=stream)

    def launcher(self, refine: int = 0) -> TunedKernel:
        """The TunedKernel (cached per refine setting) for repeated launches; `refine=k` (an
        int >= 0) measures the model's top k on the first calls of each new size."""
        from klaraptor.core.validate import check_int
        from klaraptor.runtime.launcher import TunedKernel

        refine = check_int(refine, "refine", minimum=0)
        if self.spec is None:
            raise KlaraptorError(
                f"{self.name}: launching needs the KernelSpec; pass spec= to klaraptor.load()"
            )
        if refine not in self._tuned:
            self._tuned[refine] = TunedKernel(self.spec, self.selector, refine=refine)
        return self._tuned[refine]

    def __repr__(self) -> str:
        sizes = self.report.sizes if self.report is not None else ()
        trained = f", trained at {'; '.join(str(D) for D in sizes)}" if sizes else ""
        launch = "" if self.spec is not None else ", no spec (select only)"
        return (
            f"<klaraptor.Kernel {self.name}: model {self.helper.model_name}, "
            f"{len(self.helper.candidates)} candidate blocks, for {self.device_key}"
            f"{trained}{launch}>"
        )

    def export_c(self) -> str:
        return self.helper.to_c_header()

    def export_python(self) -> str:
        return self.helper.to_python_module()
