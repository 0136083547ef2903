"""The domain of a partition function's parameters, without numpy.

Key types and their ranges, slot bits, the consistent-hash methods, the channel bound, the resource
codes, the ranges of α and σ, the utility names (Gedik §3.1, §4.1.3, §4.3) and the split schemes. Modules that
only validate or describe a function (the storage layer, the documents, the CLI) import them from
here, so that answering ``repart status`` does not load numpy; ``hashing`` and ``consistent`` build on
them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, cast, get_args

from repart.errors import InvalidInput
from repart.validation import FRACTION, Interval, Options, check, shown

KeyType = Literal["str", "int"]
Key = str | int
ConsistentMethod = Literal["ring", "jump", "prefix", "mod"]
UtilityName = Literal["A", "APM", "APLM", "ATM", "ATLM"]
SplitScheme = Literal["pkg", "dchoices", "wchoices", "rr", "fish", "dkg"]

DEFAULT_SLOT_BITS = 16
MIN_SLOT_BITS = 10
MAX_SLOT_BITS = 20
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
METHODS: tuple[ConsistentMethod, ...] = get_args(ConsistentMethod)
DEFAULT_METHOD: ConsistentMethod = "prefix"
MAX_CHANNELS = 65_536
UTILITY_NAMES: tuple[UtilityName, ...] = get_args(UtilityName)
#: The rules split mode picks a hot key's candidate channels by, one per seed paper.
SPLIT_SCHEMES: tuple[SplitScheme, ...] = get_args(SplitScheme)
#: Resource codes (Gedik §3.1): β of state and computation, C, L or Q; communication is always L.
RESOURCE_CODES = ("CCL", "CLL", "CQL", "LCL", "LLL", "LQL", "QCL", "QLL", "QQL")

SLOT_BITS = Interval(int, MIN_SLOT_BITS, MAX_SLOT_BITS)
INT64_KEY = Interval(int, INT64_MIN, INT64_MAX)
ALPHA = Interval(float, 1, None)  # α >= 1: the tolerated max/min load ratio (Eq. 2, 4, 6)
SIGMA = FRACTION  # σ in (0, 1]: the share of the allowed imbalance left to untracked items (§4.1.3)
_KEY_REQUIREMENT = f"must be a str or a signed 64-bit int (in [{INT64_MIN}, {INT64_MAX}])"


def check_slot_bits(slot_bits: int) -> int:
    """``slot_bits`` if it is an integer in [10, 20]; ``InvalidInput("slot_bits")`` otherwise."""
    return cast(int, check("slot_bits", slot_bits, SLOT_BITS))


def check_alpha(alpha: float) -> float:
    """α as a float if it is a finite number >= 1 (``ALPHA``); ``InvalidInput("alpha")`` otherwise."""
    return cast(float, check("alpha", alpha, ALPHA))


def check_sigma(sigma: float) -> float:
    """σ as a float if it is in (0, 1] (``SIGMA``); ``InvalidInput("sigma")`` otherwise."""
    return cast(float, check("sigma", sigma, SIGMA))


def check_utility(name: str) -> UtilityName:
    """Normalise a utility name (``APM``, ``U^APM`` and ``apm`` are the same); ``InvalidInput("utility")``
    otherwise."""
    key = name.upper().removeprefix("U^") if isinstance(name, str) else name
    if key not in UTILITY_NAMES:
        accepted = Options(UTILITY_NAMES)
        raise InvalidInput("utility", f"must be {accepted} (any case, U^ prefix allowed), got {shown(name)}")
    return key


def key_type_of(key: object, field: str = "key") -> KeyType:
    """The key type of one key; ``InvalidInput(field)`` for anything but str or a signed 64-bit int."""
    if isinstance(key, str):
        return "str"
    if (type(key) is int and INT64_MIN <= key <= INT64_MAX) or INT64_KEY.accepts(key):
        return "int"
    raise InvalidInput(field, f"{_KEY_REQUIREMENT}, got {shown(key)} of type {type(key).__name__}")


def common_key_type(keys: Iterable[object], field: str = "keys") -> KeyType | None:
    """The one key type shared by all ``keys`` (None when empty); ``InvalidInput(field)`` for a key
    that is not one, or keys of both types (one region uses one key type)."""
    listed = keys if isinstance(keys, list | tuple) else list(keys)
    if listed and all(type(key) is str for key in listed):  # fast paths for plain keys
        return "str"
    if (
        listed
        and all(type(key) is int for key in listed)
        and INT64_MIN <= min(listed) <= max(listed) <= INT64_MAX
    ):
        return "int"
    found: KeyType | None = None
    for key in listed:
        kind = key_type_of(key, field)
        if found is None:
            found = kind
        elif kind != found:
            raise InvalidInput(field, f"must all be {found!r} keys or all {kind!r} keys, got both")
    return found
