"""A job's keyed state store: Parquet data files listed per channel by a commit log, on a local directory or
an object store, moved between partition functions by migration plans."""
