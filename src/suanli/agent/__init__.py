"""The node agent's host side: GPU discovery, workload isolation, executors and restart policy.

Nothing here talks to the server; the agent loop (registration, heartbeats, assignments) plugs these
pieces in.
"""
