"""Errors of the static-analysis package (all are KlaraptorErrors)."""

from __future__ import annotations

from klaraptor.core.errors import CompileError, KlaraptorError

ISA_EXTRA = "pip install 'klaraptor[isa]'"


class ToolMissingError(KlaraptorError):
    """A tool (NVRTC, cuobjdump, nvdisasm) is not installed or cannot be loaded."""


class DisassemblyError(KlaraptorError):
    """cuobjdump failed on a cubin, or its output could not be parsed."""


class UnknownOpcodeError(KlaraptorError):
    """An opcode the classification table does not know."""

    def __init__(self, opcodes: list[str], kernel: str, isa: str = "SASS") -> None:
        self.opcodes = list(opcodes)
        self.kernel = kernel
        super().__init__(
            f"kernel {kernel!r}: {isa} opcode(s) {', '.join(self.opcodes)} are not in klaraptor's "
            f"{isa} classification table (klaraptor/isa/classify.py); add them there with a "
            "public source, or analyse with strict=False to map them to 'unknown' and continue"
        )


__all__ = [
    "ISA_EXTRA",
    "CompileError",
    "DisassemblyError",
    "KlaraptorError",
    "ToolMissingError",
    "UnknownOpcodeError",
]
