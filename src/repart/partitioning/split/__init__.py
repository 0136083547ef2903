"""Split mode: functions that keep Gedik's home for every key and spread a few hot keys
over several channels, and how they are built.

- ``function``: ``SplitFunction`` (home function + split table), its canonical JSON and row lookup;
  ``load_function`` reads a stored function of either kind.
- ``alias``: a split key's Walker alias table (integer masses, Vose's construction), which picks a
  row's candidate from its row hash in O(1).
- ``params``: ``SPLIT_SCHEMES`` and ``SplitParams`` (the scheme, θ and each scheme's parameters, checked
  field by field, stored as plain settings).
- ``candidates``: each scheme's candidate rule (counts, hash choices in rendezvous order, FISH's ring,
  DKG's contiguous channels).
- ``weights``: water-filling, the weights that balance the predicted channel loads.
- ``build``: ``build_split(previous, estimate, N, split=…)``, the next split function from a window.
- ``report``: ``SplitReport`` (predicted b, b_lb, memory, the head, d) and ``SplitBuildResult``.
"""
