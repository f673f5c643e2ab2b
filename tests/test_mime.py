"""The light MIME reader over bytes (`message_bytes`) and the "bytes" reader of EmailFeatures."""

from __future__ import annotations

import base64
import quopri

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream.features import EmailFeatures
from pegasos_stream.features.email import message_text
from pegasos_stream.features.mime import MAX_DEPTH, message_bytes

PLAIN = "From: Alice <alice@example.com>\nTo: bob@example.com\nSubject: Lunch  today\n\nSee you\tat  noon.\n"

MULTIPART = (
    "Received: from mx.example.com\r\n"
    "From: =?utf-8?B?SsO2cmc=?= <j@example.com>\r\n"
    "Subject: =?iso-8859-1?Q?Cheap_pills_=3D_now?=\r\n"
    "Content-Type: multipart/alternative;\r\n"
    ' boundary="==b1=="\r\n'
    "\r\n"
    "This is a preamble.\r\n"
    "--==b1==\r\n"
    "Content-Type: text/plain; charset=us-ascii\r\n"
    "Content-Transfer-Encoding: quoted-printable\r\n"
    "\r\n"
    "Buy now at a soft=\r\n"
    "ly broken price: 3=3D3.\r\n"
    "--==b1==\r\n"
    "Content-Type: text/html\r\n"
    "Content-Transfer-Encoding: base64\r\n"
    "\r\n"
    + base64.encodebytes(b"<html><body><p>Buy&nbsp;now &amp; save &#36;5</p></body></html>").decode()
    + "--==b1==\r\n"
    "Content-Type: image/gif\r\n"
    "Content-Transfer-Encoding: base64\r\n"
    "\r\n"
    "R0lGODlhAQABAAAAACw=\r\n"
    "--==b1==--\r\n"
    "An epilogue.\r\n"
)


def test_a_plain_message_is_its_subject_sender_and_body_with_whitespace_runs_made_one_space():
    assert message_bytes(PLAIN.encode()) == b"subject: Lunch today from: Alice <alice@example.com> See you at noon. "


def test_a_multipart_message_is_its_decoded_text_parts_without_preamble_epilogue_or_images():
    text = message_bytes(MULTIPART.encode())
    assert (
        text
        == (
            "subject: Cheap pills = now from: Jörg <j@example.com> Buy now at a softly broken price: 3=3. "
            "Buy now & save $5 "
        ).encode()
    )


@pytest.mark.parametrize("message", [PLAIN, MULTIPART], ids=["plain", "multipart"])
def test_on_well_formed_messages_it_reads_what_the_email_package_reads(message):
    assert message_bytes(message.encode()).decode().strip() == message_text(message).strip()


def test_an_mbox_envelope_line_is_skipped_and_a_text_that_is_not_a_message_is_kept_as_it_is():
    assert message_bytes(b"From alice Mon Jan  1 00:00:00 2002\n" + PLAIN.encode()) == message_bytes(PLAIN.encode())
    for text in (b"Win a prize now!!! Call 0800", b"Note: not a message\n\nat all", b""):
        assert message_bytes(text) == text


def test_quoted_printable_and_base64_decode_as_defined_on_junk():
    message = (
        b"Subject: x\nContent-Transfer-Encoding: quoted-printable\n\n=41=4a=zz= \n=\nend=",
        b"Subject: x\nContent-Transfer-Encoding: base64\n\nQU=J D*\nQ",  # junk ignored, a lone last letter dropped
        b"Subject: x\nContent-Transfer-Encoding: base64\n\nQUJDQQQ",  # a last group of 3 letters: 2 bytes
    )
    assert message_bytes(message[0]) == b"subject: x AJ=zz= end="
    assert message_bytes(message[1]) == b"subject: x ABC"
    assert message_bytes(message[2]) == b"subject: x ABCA\x04"


def test_numeric_entities_that_name_no_character_become_a_space_and_unknown_names_stay():
    message = b"Subject: x\nContent-Type: text/html\n\n<b>a</b>&#xD800;&#1114112;&#233;&copy;&LT;"
    assert message_bytes(message) == b"subject: x a " + "é".encode() + b"&copy;<"


def test_multipart_nesting_is_read_to_a_bounded_depth_and_deeper_entities_as_text():
    def nest(depth: int) -> bytes:
        if depth == 0:
            return b"Content-Type: text/plain\n\ndeep text\n"
        boundary = b"b%d" % depth
        return (
            b"Content-Type: multipart/mixed; boundary="
            + boundary
            + b"\n\n--"
            + boundary
            + b"\n"
            + nest(depth - 1)
            + b"--"
            + boundary
            + b"--\n"
        )

    assert message_bytes(b"Subject: s\n" + nest(MAX_DEPTH)) == b"subject: s deep text"
    assert (
        message_bytes(b"Subject: s\n" + nest(MAX_DEPTH + 1))
        == b"subject: s --b1 Content-Type: text/plain deep text --b1--"
    )


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_are_read_without_an_error(data):
    text = message_bytes(data)
    assert isinstance(text, bytes)
    assert message_bytes(b"Subject: s\n" + data) is not None


_LINES = st.sampled_from(
    [
        b"Subject: =?utf-8?B?w6k=?= =?x?Q?a_b?=",
        b"From: a@b",
        b"Content-Type: multipart/mixed; boundary=zz",
        b'Content-Type: multipart/alternative; boundary="zz"',
        b"Content-Type: text/html",
        b"Content-Transfer-Encoding: base64",
        b"Content-Transfer-Encoding: quoted-printable",
        b"--zz",
        b"--zz--",
        b" folded",
        b"",
        b"\r",
        b"<a href=x>&amp;&#9;=3D=\r",
        b"QUJD",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_LINES, st.binary(max_size=20)), max_size=30))
def test_messages_built_from_mime_pieces_are_read_without_an_error_and_with_single_spaces(lines):
    text = message_bytes(b"Subject: s\n" + b"\n".join(lines))
    assert text.startswith(b"subject: ")
    for run in (b"  ", b"\n", b"\t", b"\r"):
        assert run not in text


def test_the_bytes_reader_gives_ascii_text_the_columns_of_the_email_reader():
    for options in ({"hash_bits": 20}, {}, {"hash_bits": 18, "words": True, "binary": False}):
        by_bytes = EmailFeatures(reader="bytes", **options).transform_one(PLAIN)
        by_email = EmailFeatures(reader="email", **options).transform_one(PLAIN)
        assert by_bytes == by_email


def test_the_bytes_reader_takes_n_grams_of_bytes_up_to_max_chars_bytes():
    features = EmailFeatures(reader="bytes", char_ngram=2, max_chars=4, normalize=False, parse=False)
    assert features.transform_one("éa!") == {"c:\xc3\xa9": 1, "c:\xa9a": 1, "c:a!": 1}
    assert features.transform_one(b"abcdef") == {"c:ab": 1, "c:bc": 1, "c:cd": 1}
    with pytest.raises(ValueError, match="reader"):
        EmailFeatures(reader="mime")


def test_quoted_printable_agrees_with_the_standard_library_on_well_formed_input():
    body = "Price: 30€ = cheap\nsoft " * 5 + "end"
    encoded = quopri.encodestring(body.encode())
    text = message_bytes(b"Subject: q\nContent-Transfer-Encoding: quoted-printable\n\n" + encoded)
    assert text == b"subject: q " + b" ".join(body.encode().split())
