"""`klaraptor instrument`: C/C++ programs tuned without editing their launches.

KLARAPTOR's deployment (thesis §5.1-5.2, App. A.2): find the annotated kernels and their
launches in the host code, and before every launch ask the kernel's helper program for the
launch configuration of the launch's data sizes. Here that is a source-to-source rewrite: the
host code is parsed with libclang (see `parse`), each launch of an annotated kernel with a build
becomes a call of a small generated wrapper (see `emit`), and the helper headers are written
beside the program, which then compiles with nvcc as before.
"""

from klaraptor.instrument.core import (
    HelperLookup,
    Instrumented,
    LaunchOutcome,
    Notice,
    check_source,
    default_output,
    instrument,
    program_header_name,
)

__all__ = [
    "HelperLookup",
    "Instrumented",
    "LaunchOutcome",
    "Notice",
    "check_source",
    "default_output",
    "instrument",
    "program_header_name",
]
