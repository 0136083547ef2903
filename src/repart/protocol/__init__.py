"""The contract between jobs and the controller.

- ``snapshot``: the snapshot document (``Snapshot.from_document`` / ``to_document``) and its JSON Schema;
- ``counter_items``: the document's ``items`` (lossy-counter entries), parsed and held as columns;
- ``limits``: the largest snapshot file the controller ingests by default;
- ``spool``: the spool directory a job writes snapshot files into (naming, ``done/``, ``rejected/``);
- ``files``: the one durable writer (write, fsync, rename, fsync of the directory) for every file
  repart writes;
- ``client``: the ``ControllerClient`` port a job talks to the controller through;
- ``merge``: the merge of a split key's partial state that a split-mode region declares.
"""
