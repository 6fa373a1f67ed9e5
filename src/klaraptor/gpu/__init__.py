"""Everything that touches a GPU: the backend (CuPy: compile, launch, time, check), worker
processes and their isolation (process, worker), Nsight Compute (ncu), the collector (collect)
and the device microbenchmarks (microbench). CuPy is imported lazily, never at import time."""
