# klaraptor per-kernel config for bicg_kernel1 of PolyBench-ACC's bicg.cu (Python syntax, literals only).
grid = ("ceil(nx / bx)", "1", "1")
arrays = {"A": "nx * nx", "r": "nx", "s": "nx"}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"ny": "nx"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NX": "nx", "_PB_NX": "nx", "NY": "ny", "_PB_NY": "ny"}
sizes = [512, 1024, 2048]
default_block = [256, 1, 1]
