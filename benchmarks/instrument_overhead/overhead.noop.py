# klaraptor per-kernel config for noop (benchmarks/instrument_overhead/overhead.cu).
grid = ("ceil(n / bx)", "1", "1")
arrays = {"a": "n"}
sizes = [4096, 16384, 32768]
default_block = [256, 1, 1]
