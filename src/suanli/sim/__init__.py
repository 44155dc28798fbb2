"""Simulation side: fleet and trace files, and the virtual-time simulator over the domain scheduler."""
