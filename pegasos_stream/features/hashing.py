"""Feature hashing into a fixed number of columns, stable across processes and platforms."""

from __future__ import annotations

import math
import numbers
import zlib
from collections.abc import Hashable, Mapping

from river import base

__all__ = ["DictHasher", "check_hash_bits", "feature_hash"]


def _canonical(key: Hashable) -> bytes:
    """The bytes a key is hashed by; keys equal in a dict (1, 1.0, True) give the same bytes.

    A str is its UTF-8 encoding (lone surrogates kept); other keys are tagged: ``\\0i`` + decimal
    digits for an integer (bool and numpy integers included) or an integral float, ``\\0f`` + the
    hexadecimal form for any other real number, ``\\0b`` + the bytes for bytes, ``\\0n`` for None,
    and ``\\0t`` + the length-prefixed forms of the items for a tuple. Any other key is a ValueError.
    """
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, numbers.Integral):
        return b"\0i%d" % int(key)
    if isinstance(key, numbers.Real):
        number = float(key)
        if math.isfinite(number) and number.is_integer():
            return b"\0i%d" % int(number)
        return b"\0f" + number.hex().encode("ascii")
    if isinstance(key, bytes):
        return b"\0b" + key
    if key is None:
        return b"\0n"
    if isinstance(key, tuple):
        parts = [_canonical(item) for item in key]
        return b"\0t%d:" % len(parts) + b"".join(b"%d:" % len(part) + part for part in parts)
    raise ValueError(f"feature {key!r}: a key of type {type(key).__name__} cannot be hashed")


def _finite(value: object) -> bool:
    """Whether a value is a finite real number (an int beyond the float range is not)."""
    try:
        return isinstance(value, numbers.Real) and math.isfinite(value)
    except OverflowError:
        return False


def feature_hash(key: Hashable) -> int:
    """A 32-bit hash of a feature key: CRC-32 of its canonical bytes, the same in every process."""
    if type(key) is str:  # the common case, without the call of _canonical
        return zlib.crc32(key.encode("utf-8", "surrogatepass"))
    return zlib.crc32(_canonical(key))


def check_hash_bits(hash_bits: object) -> None:
    """Refuse a hash_bits that is not an integer from 1 to 32."""
    if isinstance(hash_bits, bool) or not isinstance(hash_bits, int) or not 1 <= hash_bits <= 32:
        raise ValueError(f"hash_bits={hash_bits!r}: expected an integer from 1 to 32")


class DictHasher(base.Transformer):
    """Maps the keys of a feature dict to 2^hash_bits integer columns, so the model stays bounded.

    A key goes to column ``feature_hash(key) mod 2^hash_bits`` (CRC-32 of the key's canonical
    bytes: independent of ``PYTHONHASHSEED`` and of the platform; `EmailFeatures` hashes with the
    same function). Keys that share a column have their values summed, in the order of ``x``;
    columns come in the order of their first key in ``x``. A value that is not a finite real number,
    or a key that is not a str, number, bytes, None or tuple of those, is a ValueError naming the key.

    Parameters
    ----------
    hash_bits
        log2 of the number of columns, from 1 to 32.

    Examples
    --------

    >>> from pegasos_stream.features import DictHasher
    >>> hasher = DictHasher(hash_bits=4)
    >>> hasher.transform_one({"spam": 1.0, "ham": 0.5, 7: 2.0})
    {13: 1.0, 9: 0.5, 3: 2.0}

    "cheap" shares column 13 with "spam":

    >>> hasher.transform_one({"spam": 1.0, "ham": 0.5, "cheap": 0.25})
    {13: 1.25, 9: 0.5}

    """

    def __init__(self, hash_bits: int = 20):
        check_hash_bits(hash_bits)
        self.hash_bits = hash_bits

    def transform_one(self, x: Mapping) -> dict:
        mask = (1 << self.hash_bits) - 1
        out: dict[int, float] = {}
        for key, value in x.items():
            if not _finite(value):
                raise ValueError(f"feature {key!r} has value {value!r}: expected a finite number")
            column = feature_hash(key) & mask
            out[column] = out[column] + value if column in out else value
        return out
