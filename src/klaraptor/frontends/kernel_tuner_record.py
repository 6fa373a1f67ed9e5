"""Kernel Tuner import: the kernel's record and its collection facts on the file's GPU (what
an import knows of the kernel's attributes; per variant for a kernel with program
parameters), and the checks that keep imports of different kernel versions apart."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from klaraptor.core.types import KernelAttributes, ParamValues
from klaraptor.device.profile import DeviceProfile
from klaraptor.frontends.kernel_tuner_files import KernelTunerImportError
from klaraptor.spec import KernelSpec
from klaraptor.store import CollectFacts, KernelRecord, Store
from klaraptor.store.records import params_text


def check_fingerprint(store: Store, spec: KernelSpec) -> None:
    known = store.kernel(spec.name)
    if known and known.fingerprint != spec.fingerprint() and store.count_measurements(spec.name):
        raise KernelTunerImportError(
            f"the store {store.path} holds measurements of kernel {spec.name!r} made for a "
            "different version of it (source, options, grid, constraints or data parameters "
            "changed); delete them (Store.delete_kernel) or give this version another name"
        )


def kt_imports(facts: CollectFacts | None) -> list[dict[str, Any]]:
    return [i for i in (facts.imports if facts else ()) if i.get("tool") == "kernel_tuner"]


def check_same_variant(
    store: Store, spec: KernelSpec, device_key: str, fixed: Mapping[str, Any], path: Path
) -> None:
    previous = kt_imports(store.collect_facts(spec.name, device_key))
    before = previous[-1].get("fixed") if previous else None
    if before is not None and before != json.loads(json.dumps(dict(fixed))):
        raise KernelTunerImportError(
            f"{path}: the store holds Kernel Tuner measurements of {spec.name!r} with the "
            f"tunables fixed to {before}, this import fixes {dict(fixed)}; they are different "
            "variants of the kernel: import this one under another spec name"
        )


def record_kernel(
    store: Store,
    spec: KernelSpec,
    device: DeviceProfile,
    *,
    fixed: Mapping[str, Any],
    regs: set[int],
    source: str,
    n: int,
    variant_regs: Mapping[ParamValues, int] | None = None,
) -> list[str]:
    """Register the kernel and merge what the import knows into its collection facts on the
    file's GPU; returns the attributes that are assumed, not known. Attributes measured by
    klaraptor itself are kept as they are."""
    store.put_kernel(
        KernelRecord(spec.name, spec.fingerprint(), spec.data_names, spec.to_summary())
    )
    facts = store.collect_facts(spec.name, device.key) or CollectFacts(device_name=device.name)
    missing = dict(facts.attributes_assumed)
    attributes = facts.attributes
    if attributes is None or missing:
        attrs = attributes.to_dict() if attributes is not None else {}
        if regs:
            attrs["num_regs"] = (
                max(regs) if "num_regs" in missing else max(regs | {attrs.get("num_regs", 0)})
            )
            missing.pop("num_regs", None)
        elif "num_regs" not in attrs or "num_regs" in missing:
            attrs["num_regs"] = 0
            missing["num_regs"] = (
                "not in the file (tune with observers=[RegisterObserver()] to record it); 0 "
                "assumed, so occupancy ignores the register limit"
            )
        for name, value, why in (
            ("static_smem", 0, "Kernel Tuner does not record it; 0 assumed"),
            ("const_size", 0, "Kernel Tuner does not record it; 0 assumed"),
            ("local_size", 0, "Kernel Tuner does not record it; 0 assumed"),
            (
                "max_threads_per_block",
                device.max_threads_per_block,
                "the kernel's own limit is not recorded; the device's limit assumed",
            ),
            (
                "max_dynamic_smem",
                device.smem_per_block,
                "not recorded; the default (no opt-in) assumed",
            ),
        ):
            if name not in attrs or name in missing:
                attrs[name], missing[name] = value, why
        attributes = KernelAttributes.from_dict(attrs)
    now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    entry = {
        "tool": "kernel_tuner",
        "fixed": dict(fixed),
        "source": source,
        "points": n,
        "date": now,
    }
    imports = (*facts.imports, entry)[-20:]
    variant_attributes = dict(facts.variant_attributes)
    if spec.params and attributes is not None:
        # Kernel Tuner compiles each variant separately: its registers are its own.
        for pv, n_regs in (variant_regs or {}).items():
            variant_attributes[params_text(pv)] = dataclasses.replace(attributes, num_regs=n_regs)
    store.put_collect_facts(
        spec.name,
        device.key,
        dataclasses.replace(
            facts,
            device_name=facts.device_name or device.name,
            attributes=attributes,
            attributes_assumed=missing,
            imports=imports,
            variant_attributes=variant_attributes,
            updated=now,
        ),
    )
    return sorted(missing)


def known_regs(store: Store, spec: KernelSpec, device_key: str) -> int | None:
    facts = store.collect_facts(spec.name, device_key)
    if facts is None or facts.attributes is None or "num_regs" in facts.attributes_assumed:
        return None
    return facts.attributes.num_regs
