"""The ``repart`` command line (typer)."""
