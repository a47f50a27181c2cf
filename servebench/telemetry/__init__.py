"""servebench.telemetry (see DESIGN.md for what this layer owns)."""
