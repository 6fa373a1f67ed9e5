"""Front-ends: ways to describe a kernel to klaraptor besides writing a KernelSpec by hand
(annotated: KLARAPTOR-style `#pragma kernel_info_*` .cu files)."""
