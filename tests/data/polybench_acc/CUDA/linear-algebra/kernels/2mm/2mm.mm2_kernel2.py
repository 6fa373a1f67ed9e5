# klaraptor per-kernel config for mm2_kernel2 of PolyBench-ACC's 2mm.cu (Python syntax, literals only).
grid = ("ceil(ni / bx)", "ceil(ni / by)", "1")
arrays = {"tmp": "ni * ni", "C": "ni * ni", "D": "ni * ni"}
scalars = {"alpha": 1.5, "beta": 0.5}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"nj": "ni", "nk": "ni", "nl": "ni"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NI": "ni", "_PB_NI": "ni", "NJ": "nj", "_PB_NJ": "nj", "NK": "nk", "_PB_NK": "nk", "NL": "nl", "_PB_NL": "nl"}
sizes = [128, 192, 256, 384]
default_block = [32, 8, 1]
