"""Hardware parameters H: the device profile (device query plus microbenchmark results, each
with its provenance), the occupancy calculator as a rational program, and the recorded
profiles of GPUs measured earlier. Measuring a profile needs a GPU and lives in `collect`."""

from klaraptor.device.profile import DeviceProfile

__all__ = ["DeviceProfile"]
