"""servebench.servers (see DESIGN.md for what this layer owns)."""
