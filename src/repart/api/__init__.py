"""The controller's HTTP API for jobs and operators (``repart serve``, ``repart run --api-port``)."""
