"""What a step costs and what a device allows: device profiles, the resource profiler,
the theta_max search, memory measurement and the per-phase clock."""
