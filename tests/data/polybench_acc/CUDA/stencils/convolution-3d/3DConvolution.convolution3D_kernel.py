# klaraptor per-kernel config for convolution3D_kernel of PolyBench-ACC's 3DConvolution.cu (Python syntax, literals only).
grid = ("ceil(ni / bx)", "ceil(ni / by)", "1")
arrays = {"A": "ni * ni * ni", "B": "ni * ni * ni"}
scalars = {"i": "ni // 2"}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"nj": "ni", "nk": "ni"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NI": "ni", "_PB_NI": "ni", "NJ": "nj", "_PB_NJ": "nj", "NK": "nk", "_PB_NK": "nk"}
sizes = [64, 96, 128]
default_block = [32, 8, 1]
