"""The tests' S3 endpoint: moto's server, with its conditional puts made atomic.

moto checks ``If-None-Match: *`` and then stores the object as two steps on whichever of its request
threads serves the put, so two puts of one key racing on two threads can both succeed. S3 itself
decides a conditional put atomically, and the state store's commit rests on that (two writers racing
for one log document: exactly one wins), so this server makes moto's put of an object one step under
a lock. Only the one-request PutObject is made atomic (moto's multipart completion and CopyObject
keep their check-then-store), which is the request the store's ``create`` sends: obstore's put with
``mode="create"`` never uploads in parts. Everything else is moto's server as ``moto_server`` runs it.
Run:
``python tests/s3_endpoint.py -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_PUTS = threading.Lock()
_put_object = S3Response.put_object


@functools.wraps(_put_object)
def _atomic_put_object(self: S3Response) -> Any:
    with _PUTS:
        return _put_object(self)


S3Response.put_object = _atomic_put_object  # type: ignore[method-assign]

if __name__ == "__main__":
    main(sys.argv[1:])
