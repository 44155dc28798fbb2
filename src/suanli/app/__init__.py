"""Use cases: load through ports, decide with the domain, apply through ports. No SQL, no HTTP."""
