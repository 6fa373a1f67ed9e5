"""The public API's checks of the objects a build takes (a spec, a store, a device profile): each
refuses anything else with how to get the right one. The checks of plain values (numbers, names,
sizes, paths) are `klaraptor.core.validate`'s."""

from __future__ import annotations

import os
from typing import Any

from klaraptor.core.errors import KlaraptorError, SpecError, StoreError
from klaraptor.core.validate import shown
from klaraptor.device.profile import DeviceProfile
from klaraptor.spec import KernelSpec
from klaraptor.store import Store


def check_spec(value: Any, what: str = "spec") -> KernelSpec:
    """A KernelSpec; a name or anything else is refused with how to get one."""
    if isinstance(value, KernelSpec):
        return value
    hint = ""
    if isinstance(value, str):
        hint = (
            f"; for a suite kernel use klaraptor.suite.get({value!r}), for a built one "
            f"klaraptor.load({value!r})"
        )
    raise SpecError(f"{what} must be a klaraptor.KernelSpec, got {shown(value)}{hint}")


def check_store(value: Any, *, must_exist: bool = False) -> Store | None:
    """None (the default store), a Store, or a path to one (opened here)."""
    if value is None or isinstance(value, Store):
        return value
    if isinstance(value, (str, os.PathLike)):
        if not str(value).strip():
            raise StoreError("store= is an empty path; give a Store or the path of one")
        return Store(value, must_exist=must_exist)
    raise StoreError(
        f"store= must be a klaraptor.store.Store or the path of one, got {shown(value)}"
    )


def check_device(value: Any, what: str = "device=") -> Any:
    """None or a DeviceProfile; a name is refused with how to get one."""
    if value is None or isinstance(value, DeviceProfile):
        return value
    hint = ""
    if isinstance(value, str):
        hint = f"; for a committed profile use klaraptor.device.profile.recorded_profile({value!r})"
    raise KlaraptorError(f"{what} must be a DeviceProfile, got {shown(value)}{hint}")


__all__ = ["check_device", "check_spec", "check_store"]
