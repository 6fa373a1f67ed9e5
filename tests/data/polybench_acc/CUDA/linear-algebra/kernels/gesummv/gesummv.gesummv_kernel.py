# klaraptor per-kernel config for gesummv_kernel of PolyBench-ACC's gesummv.cu (Python syntax, literals only).
grid = ("ceil(n / bx)", "1", "1")
arrays = {"A": "n * n", "B": "n * n", "tmp": "n", "x": "n", "y": "n"}
scalars = {"alpha": 1.5, "beta": 0.5}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "N": "n", "_PB_N": "n"}
sizes = [512, 1024, 2048]
default_block = [256, 1, 1]
