"""servebench.scenario (see DESIGN.md for what this layer owns)."""
