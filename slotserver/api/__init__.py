"""The HTTP edge: app factory, state, routes, response bodies and metrics adapters."""
