"""Hardware parameters H: the device profile (device limits from the query, the MWP-CWP inputs
and SAAKE's resources from microbenchmarks, each with its provenance), the occupancy calculator
as a rational program, and the recorded profiles of GPUs measured earlier. Measuring a profile needs a GPU and lives in `collect`."""

from klaraptor.device.profile import DeviceLimits, DeviceProfile, MwpCwpParams, SaakeResources

__all__ = ["DeviceLimits", "DeviceProfile", "MwpCwpParams", "SaakeResources"]
