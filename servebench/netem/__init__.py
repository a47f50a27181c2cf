"""servebench.netem (see DESIGN.md for what this layer owns)."""
