"""servebench.analysis (see DESIGN.md for what this layer owns)."""
