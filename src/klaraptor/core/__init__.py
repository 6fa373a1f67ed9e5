"""What every stage shares: the value types (D, blocks, grids, configurations), the errors and
warnings, the canonical metrics' names, and the provenance stamped on every recorded figure.
Imports nothing else of klaraptor."""
