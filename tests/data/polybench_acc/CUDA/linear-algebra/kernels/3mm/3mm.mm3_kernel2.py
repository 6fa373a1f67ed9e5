# klaraptor per-kernel config for mm3_kernel2 of PolyBench-ACC's 3mm.cu (Python syntax, literals only).
grid = ("ceil(ni / bx)", "ceil(ni / by)", "1")
arrays = {"C": "ni * ni", "D": "ni * ni", "F": "ni * ni"}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"nj": "ni", "nk": "ni", "nl": "ni", "nm": "ni"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NI": "ni", "_PB_NI": "ni", "NJ": "nj", "_PB_NJ": "nj", "NK": "nk", "_PB_NK": "nk", "NL": "nl", "_PB_NL": "nl", "NM": "nm", "_PB_NM": "nm"}
sizes = [128, 192, 256, 384]
default_block = [32, 8, 1]
