# klaraptor per-kernel config for atax_kernel2 of PolyBench-ACC's atax.cu (Python syntax, literals only).
grid = ("ceil(nx / bx)", "1", "1")
arrays = {"A": "nx * nx", "y": "nx", "tmp": "nx"}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"ny": "nx"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NX": "nx", "_PB_NX": "nx", "NY": "ny", "_PB_NY": "ny"}
sizes = [512, 1024, 2048]
# No default_block: the program launches this 1-D kernel with a (32, 8) block.
