"""Replicas of slotserver on Ray Serve: routing by affinity, and (later) learned drafter state shared
across replicas. The top layer beside ``cli``: nothing in the server imports it."""
