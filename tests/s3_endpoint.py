"""The local S3 endpoint of the tests and benchmarks: moto's server, started by ``running``.

moto checks ``If-None-Match: *`` and then stores the object as two steps on whichever of its request
threads serves the put, so two puts of one key racing on two threads can both succeed. S3 itself
decides a conditional put atomically, and the state store's commit rests on that (two writers racing
for one log document: exactly one wins), so the tests' endpoint (``atomic=True``) makes moto's put of
an object one step under a lock. Only the one-request PutObject is made atomic (moto's multipart
completion and CopyObject keep their check-then-store), which is the request the store's ``create``
sends: obstore's put with ``mode="create"`` never uploads in parts. Everything else is moto's server
as ``moto_server`` runs it. Run as a script (``python tests/s3_endpoint.py -H 127.0.0.1 -p PORT``) it
is that atomic server; importing this module patches nothing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def running(*, atomic: bool = True, log: Path | None = None) -> Iterator[str]:
    """The URL of moto's server on a free loopback port, stopped by its process id on exit: this
    module's atomic server, or with ``atomic=False`` moto's own ``moto_server``. Its output goes to
    the file ``log`` (discarded without one); RuntimeError, with that output, when it has not answered
    within 30 s or has exited."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = [sys.executable, __file__] if atomic else [str(Path(sys.executable).parent / "moto_server")]
    with log.open("wb") if log is not None else open(os.devnull, "wb") as out:
        process = subprocess.Popen(
            [*server, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    output = log.read_text() if log is not None else "(output discarded)"
                    raise RuntimeError(f"moto's server did not start: {output}") from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _serve(argv: list[str]) -> None:
    """moto's server with its one-request PutObject under a lock (module docstring)."""
    from moto.s3.responses import S3Response
    from moto.server import main

    puts = threading.Lock()
    put_object = S3Response.put_object

    def atomic_put_object(self: S3Response) -> Any:
        with puts:
            return put_object(self)

    S3Response.put_object = atomic_put_object  # type: ignore[method-assign]
    main(argv)


if __name__ == "__main__":
    _serve(sys.argv[1:])
