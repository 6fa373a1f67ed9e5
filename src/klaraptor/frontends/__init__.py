"""Front-ends: where kernels come from (annotated .cu files, Kernel Tuner files, ...)."""
