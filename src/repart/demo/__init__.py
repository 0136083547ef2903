"""The VWAP pipeline that `repart demo` runs on Spark under a live controller, with its measurements and
report."""
