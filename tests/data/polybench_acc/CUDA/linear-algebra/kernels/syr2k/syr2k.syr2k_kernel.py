# klaraptor per-kernel config for syr2k_kernel of PolyBench-ACC's syr2k.cu (Python syntax, literals only).
grid = ("ceil(ni / bx)", "ceil(ni / by)", "1")
arrays = {"a": "ni * ni", "b": "ni * ni", "c": "ni * ni"}
scalars = {"alpha": 1.5, "beta": 0.5}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"nj": "ni"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NI": "ni", "_PB_NI": "ni", "NJ": "nj", "_PB_NJ": "nj"}
sizes = [128, 192, 256, 384]
default_block = [32, 8, 1]
