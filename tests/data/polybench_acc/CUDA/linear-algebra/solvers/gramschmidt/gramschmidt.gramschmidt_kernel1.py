# klaraptor per-kernel config for gramschmidt_kernel1 of PolyBench-ACC's gramschmidt.cu (Python syntax, literals only).
grid = ("1", "1", "1")
arrays = {"a": "ni * ni", "r": "ni * ni", "q": "ni * ni"}
scalars = {"k": "ni // 2"}
# The program's sizes are equal (square problems): the model takes them so, and the
# instrumented launch checks it, keeping the program's own configuration where it fails.
assume = {"nj": "ni"}
# The training source: DATA_TYPE of the .cuh, and the compile-time sizes (array strides, and
# polybench.h's loop bounds _PB_*) as the kernel's own size arguments.
defines = {"DATA_TYPE": "float", "NI": "ni", "_PB_NI": "ni", "NJ": "nj", "_PB_NJ": "nj"}
sizes = [128, 192, 256, 384]
default_block = [256, 1, 1]
