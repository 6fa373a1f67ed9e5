# klaraptor per-kernel config for mvt_kernel2 of PolyBench-ACC's mvt.cu (Python syntax, literals only).
grid = ("ceil(n / bx)", "1", "1")
arrays = {"a": "n * n", "x2": "n", "y_2": "n"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "N": "n", "_PB_N": "n"}
sizes = [512, 1024, 2048]
# No default_block: the program launches this 1-D kernel with a (32, 8) block.
