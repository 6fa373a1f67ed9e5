"""GPU-side measurement: resource microbenchmarks for the SAAKE emulator, SASS of kernels."""
