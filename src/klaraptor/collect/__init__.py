"""Everything that touches a GPU: the backend (CuPy: compile, launch, time, check), worker
processes and their isolation (process, worker), Nsight Compute (ncu), the collector (collect),
the device microbenchmarks (microbench) and the per-resource latency/gap microbenchmarks of the
SAAKE emulator (resources). CuPy is imported lazily, never at import time."""
