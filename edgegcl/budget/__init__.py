"""What a step costs and what a device allows: device profiles, the resource profiler and
the theta_max search (memory measurement is edgegcl.memory, the per-phase clock
edgegcl.phases)."""
