"""Workload generators and the experiment runner that reproduces Gedik §5."""
