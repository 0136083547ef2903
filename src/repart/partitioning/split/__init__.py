"""Split mode (DESIGN §11.3): functions that keep Gedik's home for every key and spread a few hot keys
over several channels, and how they are built.

- ``function``: ``SplitFunction`` (home function + split table), its canonical JSON and row lookup;
  ``load_function`` reads a stored function of either kind.
"""
