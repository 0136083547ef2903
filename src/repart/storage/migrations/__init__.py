"""Alembic environment and revisions of the controller's schema."""
