"""Exceptions raised by klaraptor. Every error a user can cause is a KlaraptorError."""

from __future__ import annotations


class KlaraptorError(Exception):
    """Base class of every error klaraptor raises on bad input or a failed step."""


class SpecError(KlaraptorError):
    """A KernelSpec (or an annotated .cu file) is malformed."""


class DataSizeError(SpecError):
    """A data size D is malformed, names the wrong parameters or lies outside their range."""


class ProgramError(KlaraptorError):
    """A rational program is malformed or cannot be evaluated / generated."""


class FitError(KlaraptorError):
    """Samples or degree bounds do not allow a rational fit."""


class StoreError(KlaraptorError):
    """The SQLite store is missing, corrupt, foreign or locked."""


class CompileError(KlaraptorError):
    """NVRTC rejected the kernel source; `log` holds the compiler's log."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(f"{message}\n--- NVRTC log ---\n{log}" if log else message)
        self.log = log


class LaunchError(KlaraptorError):
    """The device rejected a launch, or a launch configuration is impossible."""


class CollectError(KlaraptorError):
    """Data collection could not run (no GPU, worker failure, ncu failure)."""


class BuildError(KlaraptorError):
    """A kernel could not be built, or no build exists for it."""


class UnmeasuredError(BuildError):
    """None of a kernel's candidate blocks has a successful measurement to build from."""


class MissingDependencyError(KlaraptorError):
    """An optional dependency is not installed; the message names the extra that brings it."""


class PluginMissingError(MissingDependencyError):
    """A plug-in of the `klaraptor` command (the evaluation: `klaraptor bench`) is not installed;
    the message says how to install it."""


class InstrumentError(KlaraptorError):
    """A host program cannot be instrumented (unreadable, unparsable, nothing to tune)."""


class KlaraptorWarning(UserWarning):
    """Base class of klaraptor's warnings: it went ahead, but you should know."""


class ExtrapolationWarning(KlaraptorWarning):
    """A data size lies outside the sizes the kernel was trained at (the choice extrapolates)."""


class DeviceWarning(KlaraptorWarning):
    """A build is used on a GPU (or driver) other than the one it was made on."""


class DataDependenceWarning(KlaraptorWarning):
    """The kernel's time depends on its input data, not only on its size: it is not
    data-oblivious, so blocks chosen from measurements on one input may not transfer."""
