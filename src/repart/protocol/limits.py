"""How large a document a job may hand the controller. Imports nothing: the CLI reads the
default of its size options from here without loading the controller.

``MAX_SNAPSHOT_BYTES``, 128 MiB, is the largest snapshot file ingested by default (``repart snapshot
ingest --max-bytes``, ``repart run --max-snapshot-bytes``); a larger one is rejected before it is read.
Ingest parses the whole document, and Python's JSON objects cost about eight times the text: a 109 MiB
document of 4M items with 10-20 character keys peaks at 0.88 GiB, 0.82 GiB above the interpreter
(``benchmarks/ingest.py``, ``docs/results/ingest.txt``), so the default keeps an ingest near 1 GiB. It
is 2.8 times the largest window the project's targets name (48 MB, 2M items) and holds about 4.5 million such
items. A job whose windows are larger should raise epsilon (fewer items retained), or the operator the
limit.
"""

MAX_SNAPSHOT_BYTES = 128 * 2**20
