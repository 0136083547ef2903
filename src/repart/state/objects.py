"""Where a state store keeps its objects: a local directory or an object store, behind one interface.

A store's location is a path or a URL:

- a path, or ``file:///abs/path``: a local directory (``LocalObjects``);
- ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``: an object store, through
  ``obstore`` (the Rust ``object_store`` crate), chosen for its conditional puts (``put`` with
  ``mode="create"``: S3's ``If-None-Match: *``, GCS's ``ifGenerationMatch=0``, Azure's
  ``If-None-Match: *``), which pyarrow's file systems lack (``RemoteObjects``).

Both offer the few operations the store needs: ``create`` (put only if absent: the commit point of a
generation), ``write`` (a new data file, or an overwritable hint), ``read``, ``open`` (a seekable file
that reads byte ranges, so Parquet footers and row groups are fetched alone), ``listing``, ``delete``
and ``sync``. On a local directory ``create`` writes a temporary file, ``fsync``s it and hard-links it
into place (the link fails when the name exists, so exactly one creator wins and nobody ever sees a
half-written document), and ``sync`` makes written data files durable before the commit names them.

Credentials come from store options (obstore's option names: ``aws_access_key_id``, ``endpoint``,
``region``, ...) or from the usual environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``, ...), read where the store is opened (the
driver). They travel to Spark executors inside the pickled store handle (a task's closure, which Spark
shows in neither its UI nor its event log), so executors need no environment of their own, and they
never appear in a ``repr``, a log document or an error message.
A remote store without credentials is refused at once, naming what is missing, rather than left to
probe a cloud metadata service.

Errors: an unknown scheme is ``InvalidInput("state")`` listing the accepted ones; a missing bucket is
``NotFound`` naming the URL; an endpoint that does not answer is ``Unavailable`` naming the URL; a
refused signature or missing permission is ``InvalidInput("credentials")``. A missing object raises
``FileNotFoundError``, which callers turn into ``Corrupt`` where the object must exist.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar, cast
from urllib.parse import urlparse

from repart.errors import InvalidInput, NotFound, Unavailable
from repart.protocol.files import fsync_path

__all__ = ["ObjectInfo", "Objects", "objects_at"]

T = TypeVar("T")

SCHEMES = ("file", "s3", "gs", "az")
_SYNC_THREADS = 16
#: Options that hold a secret: never shown.
_SECRET_WORDS = ("secret", "token", "key", "password", "credential", "sas")
#: The environment variables read for each remote scheme, as obstore's option names (lower case). They
#: are read on the driver and travel with the store handle, so executors need none of them.
_ENVIRONMENT = {
    "s3": (
        "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "aws_region",
        "aws_default_region", "aws_endpoint", "aws_endpoint_url", "aws_allow_http", "aws_skip_signature",
    ),
    "gs": (
        "google_service_account", "google_service_account_path", "google_service_account_key",
        "google_application_credentials",
    ),
    "az": (
        "azure_storage_account_name", "azure_storage_account_key", "azure_storage_sas_key",
        "azure_client_id", "azure_client_secret", "azure_tenant_id",
    ),
}  # fmt: skip
#: Options (or environment variables) any one of which gives a scheme credentials.
_CREDENTIALS = {
    "s3": ("aws_access_key_id", "access_key_id", "aws_skip_signature", "skip_signature"),
    "gs": (
        "google_service_account", "google_service_account_path", "google_service_account_key",
        "google_application_credentials", "service_account", "service_account_key", "skip_signature",
    ),
    "az": (
        "azure_storage_account_key", "account_key", "azure_storage_sas_key", "sas_key", "azure_client_secret",
        "skip_signature",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class ObjectInfo:
    """One object of a listing: its path relative to the store's root, size and last change (UTC)."""

    path: str
    size: int
    modified: datetime


class Objects(Protocol):
    """The operations a state store performs on its objects (module docstring). Paths are relative to
    the store's root, with ``/`` separators."""

    @property
    def url(self) -> str:
        """The store's location as given (a path or a URL), for messages."""
        ...

    @property
    def local_root(self) -> Path | None:
        """The directory, for a local store; None for an object store."""
        ...

    def create(self, path: str, data: bytes) -> bool:
        """Put ``data`` at ``path`` only if nothing is there, atomically; False when something is."""
        ...

    def write(self, path: str, data: bytes) -> None:
        """Put ``data`` at ``path`` (replacing what is there), atomically for readers."""
        ...

    def read(self, path: str) -> bytes:
        """The whole object; FileNotFoundError when it is missing."""
        ...

    def open(self, path: str) -> IO[bytes]:
        """A seekable binary file over the object, reading byte ranges on demand."""
        ...

    def size(self, path: str) -> int | None:
        """The object's size in bytes, None when it is missing."""
        ...

    def listing(self, prefix: str = "", after: str | None = None) -> list[ObjectInfo]:
        """The objects under ``prefix`` (whose paths sort after ``after``, when given), by path."""
        ...

    def delete(self, paths: Sequence[str]) -> None:
        """Delete ``paths``; a path already gone is not an error."""
        ...

    def sync(self, paths: Sequence[str]) -> None:
        """Make the objects at ``paths`` durable before a commit names them."""
        ...


def objects_at(location: str | os.PathLike[str], options: Mapping[str, str] | None = None) -> Objects:
    """The objects of the store at ``location`` (a path or a URL; module docstring). ``options`` are
    the object store's settings and credentials (``aws_access_key_id``, ``endpoint``, ``region``, ...).
    InvalidInput ``state`` for an unknown scheme, ``credentials`` for a remote store without any."""
    text = os.fspath(location)
    if not isinstance(text, str) or not text:
        raise InvalidInput("state", f"must be a path or a URL, got {text!r}")
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise InvalidInput(
            "state", f"must be file:///absolute/path (a local file URL names no host), got {text!r}"
        )
    if parsed.username is not None or parsed.password is not None:
        raise InvalidInput(
            "state", "must not hold credentials in the URL: give them as options or environment"
        )
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = Path(parsed.path if scheme == "file" else text)
        return LocalObjects(path.absolute(), text)
    if scheme not in SCHEMES:
        raise InvalidInput(
            "state",
            f"must be a path or a URL with scheme {', '.join(f'{s}://' for s in SCHEMES)}; got {text!r} "
            f"(scheme {scheme!r})",
        )
    if not parsed.netloc:
        raise InvalidInput(
            "state", f"must name a bucket or container: {scheme}://<bucket>/<prefix>, got {text!r}"
        )
    environment = {name: value for name in _ENVIRONMENT[scheme] if (value := os.environ.get(name.upper()))}
    given = {**environment, **{str(name).lower(): str(value) for name, value in (options or {}).items()}}
    if not any(name in given for name in _CREDENTIALS[scheme]):
        variables = {
            "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            "gs": "GOOGLE_SERVICE_ACCOUNT",
            "az": "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY",
        }[scheme]
        raise InvalidInput(
            "credentials",
            f"are missing for {text}: set {variables} in the environment, or give the store "
            f"option {_CREDENTIALS[scheme][0]}",
        )
    return RemoteObjects(text, scheme, parsed.netloc, parsed.path.strip("/"), _Secret(given))


@dataclass(frozen=True)
class LocalObjects:
    """A store's objects as files under a local directory (module docstring)."""

    root: Path
    given: str

    @property
    def url(self) -> str:
        return self.given

    @property
    def local_root(self) -> Path | None:
        return self.root

    def _path(self, path: str) -> Path:
        return self.root / path

    def create(self, path: str, data: bytes) -> bool:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = self._written_aside(target, data)
        try:
            os.link(temporary, target)
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)
        fsync_path(target.parent)
        return True

    def write(self, path: str, data: bytes) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = self._written_aside(target, data)
        try:
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)

    def _written_aside(self, target: Path, data: bytes) -> Path:
        """``data`` in a hidden temporary file beside ``target``, ``fsync``ed."""
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(out.name, 0o644)
        return Path(out.name)

    def read(self, path: str) -> bytes:
        return self._path(path).read_bytes()

    def open(self, path: str) -> IO[bytes]:
        return self._path(path).open("rb")

    def size(self, path: str) -> int | None:
        try:
            return self._path(path).stat().st_size
        except FileNotFoundError:
            return None

    def listing(self, prefix: str = "", after: str | None = None) -> list[ObjectInfo]:
        base = self._path(prefix) if prefix.endswith("/") or not prefix else self._path(prefix).parent
        if not base.is_dir():
            return []
        found = []
        for directory, _, names in os.walk(base):
            for name in names:
                full = Path(directory) / name
                relative = full.relative_to(self.root).as_posix()
                if not relative.startswith(prefix) or (after is not None and relative <= after):
                    continue
                try:
                    status = full.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                modified = datetime.fromtimestamp(status.st_mtime, UTC)
                found.append(ObjectInfo(relative, status.st_size, modified))
        return sorted(found, key=lambda info: info.path)

    def delete(self, paths: Sequence[str]) -> None:
        for path in paths:
            self._path(path).unlink(missing_ok=True)

    def sync(self, paths: Sequence[str]) -> None:
        if not paths:
            return
        with ThreadPoolExecutor(_SYNC_THREADS) as pool:  # the file system commits them together
            list(pool.map(fsync_path, [self._path(path) for path in paths]))
        for directory in sorted({self._path(path).parent for path in paths}):
            fsync_path(directory)


@dataclass(frozen=True)
class _Secret:
    """Store options, never shown: ``repr`` lists the option names and hides secret values."""

    values: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        shown = {
            name: "***" if any(word in name for word in _SECRET_WORDS) else value
            for name, value in self.values.items()
        }
        return f"_Secret({shown})"


class RemoteObjects:
    """A store's objects in a bucket (or container) of an object store, under a prefix, via obstore.

    Picklable: the obstore client is built lazily in each process from the URL and the options."""

    def __init__(self, given: str, scheme: str, bucket: str, prefix: str, options: _Secret) -> None:
        self.given = given
        self.scheme = scheme
        self.bucket = bucket
        self.prefix = prefix
        self.options = options
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def __repr__(self) -> str:
        return f"RemoteObjects({self.given!r})"

    @property
    def url(self) -> str:
        return self.given

    @property
    def local_root(self) -> Path | None:
        return None

    @property
    def client(self) -> Any:
        """The obstore store (built on first use in this process)."""
        if self._client is None:
            self._client = self._build()
        return self._client

    def _build(self) -> Any:
        """The obstore client: the options (which hold what the opening process's environment named, so
        they win over whatever this process's environment holds) as obstore's configuration, plain HTTP
        allowed only for an ``http://`` endpoint (a local S3-compatible server)."""
        from obstore.store import AzureStore, GCSStore, S3Store

        config = dict(self.options.values)
        endpoint = next(
            (config[name] for name in ("endpoint", "aws_endpoint", "aws_endpoint_url") if name in config),
            None,
        )
        if endpoint and not _is_http_url(endpoint):  # obstore panics on an endpoint that is not a URL
            raise InvalidInput(
                "options",
                f"are not valid for {self.given}: the endpoint must be an http:// or https:// URL, "
                f"got {endpoint!r}",
            )
        client_options: dict[str, Any] = {
            "timeout": timedelta(seconds=30),
            "connect_timeout": timedelta(seconds=5),
            "allow_http": bool(endpoint and endpoint.startswith("http://")),
        }
        retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=20)}
        kinds = {"s3": S3Store, "gs": GCSStore, "az": AzureStore}
        if self.scheme == "s3":
            config.setdefault("conditional_put", "etag")
        try:
            return kinds[self.scheme](
                self.bucket,
                prefix=self.prefix or None,
                config=config,
                client_options=client_options,
                retry_config=retry,
            )
        except Exception as error:  # obstore's configuration errors: an unknown option, a bad value
            raise InvalidInput("options", f"are not valid for {self.given}: {_first_line(error)}") from None

    def create(self, path: str, data: bytes) -> bool:
        import obstore

        try:
            self._run(lambda: obstore.put(self.client, path, data, mode="create"))
        except FileExistsError:
            return False
        return True

    def write(self, path: str, data: bytes) -> None:
        import obstore

        self._run(lambda: obstore.put(self.client, path, data))

    def read(self, path: str) -> bytes:
        import obstore

        return bytes(self._run(lambda: obstore.get(self.client, path).bytes()))

    def open(self, path: str) -> IO[bytes]:
        import obstore

        reader: Any = self._run(lambda: obstore.open_reader(self.client, path))
        return cast(IO[bytes], _RangeReader(reader, self._run))

    def size(self, path: str) -> int | None:
        import obstore

        try:
            return int(self._run(lambda: obstore.head(self.client, path))["size"])
        except FileNotFoundError:
            return None

    def listing(self, prefix: str = "", after: str | None = None) -> list[ObjectInfo]:
        import obstore

        def listed() -> list[ObjectInfo]:
            return [
                ObjectInfo(meta["path"], int(meta["size"]), meta["last_modified"])
                for chunk in obstore.list(self.client, prefix=prefix or None, offset=after)
                for meta in chunk
            ]

        return sorted(self._run(listed), key=lambda info: info.path)

    def delete(self, paths: Sequence[str]) -> None:
        import obstore

        if paths:
            self._run(lambda: obstore.delete(self.client, list(paths)))

    def sync(self, paths: Sequence[str]) -> None:
        """Nothing to do: an object store's put is durable when it returns."""

    def _run(self, call: Callable[[], T]) -> T:
        """``call()``, with obstore's errors turned into repart's (module docstring): a missing object
        is FileNotFoundError, an object that exists where a create wanted none FileExistsError."""
        from obstore.exceptions import (
            AlreadyExistsError,
            BaseError,
            PermissionDeniedError,
            PreconditionError,
            UnauthenticatedError,
        )

        try:
            return call()
        except (AlreadyExistsError, PreconditionError):
            raise FileExistsError(self.given) from None
        except FileNotFoundError as error:
            if _names_missing_bucket(str(error)):
                raise NotFound(
                    f"the bucket of {self.given} does not exist: create it, or fix the URL"
                ) from None
            raise
        except (UnauthenticatedError, PermissionDeniedError) as error:
            raise InvalidInput("credentials", f"were refused by {self.given}: {_first_line(error)}") from None
        except BaseError as error:
            text = str(error)
            if _names_missing_bucket(text):
                raise NotFound(
                    f"the bucket of {self.given} does not exist: create it, or fix the URL"
                ) from None
            if any(code in text for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")):
                raise InvalidInput(
                    "credentials", f"were refused by {self.given}: {_first_line(error)}"
                ) from None
            raise Unavailable(
                f"the object store at {self.given} did not answer: {_first_line(error)}"
            ) from None


class _RangeReader(io.RawIOBase):
    """obstore's ``ReadableFile`` as a Python binary file that pyarrow accepts (it lacks ``closed`` and
    ``readinto``): reads fetch byte ranges on demand, with obstore's errors turned into repart's."""

    def __init__(self, reader: Any, run: Callable[[Callable[[], Any]], Any]) -> None:
        super().__init__()
        self._reader = reader
        self._run = run

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return int(self._run(lambda: self._reader.seek(offset, whence)))

    def tell(self) -> int:
        return int(self._reader.tell())

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return bytes(self._run(self._reader.readall))
        return bytes(self._run(lambda: self._reader.read(size)))

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()


def _is_http_url(text: str) -> bool:
    """Whether ``text`` is an http:// or https:// URL with a host (an endpoint obstore can use)."""
    parsed = urlparse(text)
    return parsed.scheme in ("http", "https") and bool(parsed.netloc) and not any(c.isspace() for c in text)


def _names_missing_bucket(text: str) -> bool:
    return "NoSuchBucket" in text or "ContainerNotFound" in text or "bucket does not exist" in text.lower()


def _first_line(error: BaseException) -> str:
    """An error's first line (obstore appends a multi-line debug dump), without a request's query."""
    line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return line.split("?")[0] if "X-Amz-" in line else line
