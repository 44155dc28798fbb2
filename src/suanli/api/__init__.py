"""The REST API: app factory, thin routers, auth, error mapping, metrics."""
