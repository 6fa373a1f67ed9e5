# klaraptor per-kernel config for transpose (Python syntax, literals only).
grid = ("ceil(n / bx)", "ceil(n / by)", "1")
constraints = ["bx <= n", "by <= n"]
arrays = {"A": "n * n", "B": "n * n"}
sizes = [256, 512, 1024]
default_block = [32, 8, 1]
