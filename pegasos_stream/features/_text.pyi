"""The compiled reader and n-grams of EmailFeatures(reader="bytes") (pegasos_stream/features/_text.c)."""

def rows(
    texts: list[bytes],
    parse: bool,
    n: int,
    words: bool,
    shapes: bool,
    max_bytes: int,
    hash_bits: int,
    binary: bool,
    normalize: bool,
    hashed: bool,
    /,
) -> tuple[bytes, bytes, bytes, list[int] | None, int]: ...
def message(raw: bytes, max_bytes: int, /) -> tuple[bytes, int]: ...
