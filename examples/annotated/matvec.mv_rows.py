# klaraptor per-kernel config for mv_rows (Python syntax, literals only).
grid = ("ceil(n / bx)", "1", "1")
constraints = ["bx <= max(n, 32)"]
arrays = {"A": "n * n", "x": "n", "y": "n"}
sizes = [256, 512, 1024]
default_block = [256, 1, 1]
