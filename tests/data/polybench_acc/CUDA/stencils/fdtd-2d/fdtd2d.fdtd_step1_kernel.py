# klaraptor per-kernel config for fdtd_step1_kernel of PolyBench-ACC's fdtd2d.cu (Python syntax, literals only).
grid = ("ceil(nx / bx)", "ceil(nx / by)", "1")
arrays = {"_fict_": "500", "ex": "nx * nx", "ey": "nx * nx", "hz": "nx * nx"}
scalars = {"t": 250}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"ny": "nx"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NX": "nx", "_PB_NX": "nx", "NY": "ny", "_PB_NY": "ny"}
sizes = [256, 512, 1024]
default_block = [32, 8, 1]
