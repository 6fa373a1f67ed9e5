# klaraptor per-kernel config for covar_kernel of PolyBench-ACC's covariance.cu (Python syntax, literals only).
grid = ("ceil(m / bx)", "1", "1")
arrays = {"symmat": "m * m", "data": "m * m"}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"n": "m"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "M": "m", "_PB_M": "m", "N": "n", "_PB_N": "n"}
sizes = [128, 192, 256, 384]
default_block = [256, 1, 1]
