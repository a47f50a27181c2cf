"""servebench.load (see DESIGN.md for what this layer owns)."""
