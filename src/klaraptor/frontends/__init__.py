"""Front-ends: ways to describe a kernel to klaraptor besides writing a KernelSpec by hand.

- annotated: KLARAPTOR-style `#pragma kernel_info_*` .cu files;
- kernel_tuner: Kernel Tuner cache and T4 files as measurements, and T4 export;
- targets: what a user names on the command line.
"""
