"""The compiled parsers of svmlight and JSON records (pegasos_stream/parse/_parse.c)."""

from typing import Any

def parse_svmlight(
    lines: Any, vocabulary: dict[Any, int], keys: list[Any], max_bytes: int, names: list[Any], columns: int = ..., /
) -> tuple[bytes, bytes, bytes, bytes, bytes]: ...
def parse_json_events(
    values: list[bytes],
    id_field: str,
    x_field: str,
    label_field: str,
    text_field: str,
    max_bytes: int,
    names: Any,
    keys: Any,
    with_ids: bool,
    /,
) -> tuple[bytes, bytes, bytes, bytes, list[Any], list[Any]]: ...
def parse_json_texts(
    values: list[bytes], id_field: str, x_field: str, label_field: str, text_field: str, max_bytes: int, /
) -> tuple[bytes, list[Any], list[Any], list[Any]]: ...
def name_table(hash_bits: int, /) -> object: ...
def name_count(names: object, /) -> int: ...
