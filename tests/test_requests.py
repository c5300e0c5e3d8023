"""Parsing what users write: fractions, sizes, counts, pinned GPUs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyter_vgpu.errors import InvalidRequest
from jupyter_vgpu.slices import SliceRequest, parse_share
from jupyter_vgpu.slices.request import CLI_NAMES
from jupyter_vgpu.units import GiB, MiB, describe_fraction, format_bytes, parse_bytes, parse_fraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.25", 0.25), ("1/4", 0.25), ("25%", 0.25), (" 1 / 3 ", 1 / 3), ("1", 1.0), (0.5, 0.5), ("100%", 1.0), (".5", 0.5)],
)
def test_fractions_people_write_are_understood(text: str | float, expected: float) -> None:
    assert parse_fraction(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text", ["0", "-1", "1.5", "abc", "", "1/0", "0%", "150%", "nan", "inf", True, "1/4 GPU", "٠.٥", "١/٤", "٢٥%", "１/４"]
)
def test_bad_fractions_name_the_value_and_what_is_allowed(text: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_fraction(text)  # type: ignore[arg-type]
    message = str(caught.value)
    assert repr(text) in message
    assert "(0, 1]" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [("6GiB", 6 * GiB), ("512MiB", 512 * MiB), ("1.5GiB", int(1.5 * GiB)), ("2GB", 2 * 10**9), ("1024", 1024), ("8 gib", 8 * GiB)],
)
def test_sizes_people_write_are_understood(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["12XB", "GiB", "-1GiB", "0MiB", "six GiB", "", "1e3GiB", "٣GiB", "６GiB"])
def test_bad_sizes_name_the_value(text: str) -> None:
    with pytest.raises(InvalidRequest, match="is not a size|larger than zero|must be a positive") as caught:
        parse_bytes(text, what="gpu_memory")
    assert repr(text) in str(caught.value)


def test_format_bytes_reads_well() -> None:
    assert format_bytes(4 * GiB) == "4.0 GiB"
    assert format_bytes(300 * MiB) == "300 MiB"
    assert format_bytes(None) == "n/a"


def test_request_takes_fraction_or_memory_not_both() -> None:
    with pytest.raises(InvalidRequest, match="both set; set only one"):
        SliceRequest.parse("0.25", "6GiB")


def test_request_defaults_to_one_whole_gpu() -> None:
    request = SliceRequest.parse()
    assert (request.fraction, request.memory, request.gpus) == (1.0, None, 1)


@pytest.mark.parametrize("gpus", [0, -1, "two", 1.5, True, "٣", "２"])
def test_bad_gpu_counts_are_refused(gpus: object) -> None:
    with pytest.raises(InvalidRequest, match="gpus .* is not allowed; use a whole number of GPUs"):
        SliceRequest.parse(0.5, gpus=gpus)


def test_pinned_gpu_needs_a_single_gpu() -> None:
    assert SliceRequest.parse(0.5, gpu="1").gpu == "1"
    with pytest.raises(InvalidRequest, match="needs one GPU"):
        SliceRequest.parse(0.5, gpus=2, gpu="GPU-abc")


def test_placement_must_be_known() -> None:
    with pytest.raises(InvalidRequest, match="binpack, spread"):
        SliceRequest.parse(0.5, placement="random")


def test_command_line_names_appear_in_messages() -> None:
    with pytest.raises(InvalidRequest, match=r"^-p/--fraction 'abc'"):
        SliceRequest.parse("abc", names=CLI_NAMES)


@pytest.mark.parametrize(
    ("share", "fraction", "memory"), [("1/4", 0.25, None), ("25%", 0.25, None), ("6GiB", None, 6 * GiB), ("0.5", 0.5, None)]
)
def test_parse_share_tells_fractions_from_sizes(share: str, fraction: float | None, memory: int | None) -> None:
    request = parse_share(share)
    assert (request.fraction, request.memory) == (fraction, memory)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"fraction": 0.25}, "1/4 GPU"),
        ({"fraction": 1.0}, "1 GPU"),
        ({"memory": "6GiB"}, "6.0 GiB"),
        ({"fraction": 1.0, "gpus": 2}, "2 GPUs"),
        ({"fraction": 0.5, "gpus": 2}, "2 x 1/2 GPU"),
    ],
)
def test_requests_describe_themselves(kwargs: dict[str, object], text: str) -> None:
    assert SliceRequest.parse(**kwargs).describe() == text  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("share", "text"),
    [("0.33", "0.33 GPU"), ("33%", "33% of a GPU"), ("0.2", "1/5 GPU"), ("20%", "1/5 GPU"), ("1/3", "1/3 GPU"),
     ("12.5%", "1/8 GPU"), ("0.001", "0.001 GPU"), ("0.0000015", "0.0000015 GPU"), ("33/100", "0.33 GPU")],
)  # fmt: skip
def test_every_share_reads_as_a_simple_fraction_or_as_asked(share: str, text: str) -> None:
    """Simple fractions in one style (issue 25 found "33% GPU" beside "1/5 GPU" in one table);
    others as the user typed them, not "33/100 GPU" for `-p 0.33` (issue 33)."""
    assert parse_share(share).describe() == text


def test_equal_shares_asked_two_ways_are_each_said_as_asked() -> None:
    """`0.33` and `33%` are one share (equal requests) said two ways: worked out once per request,
    the words must not be the other's (run 21 read "0.33 GPU" for `-p 33%` after a `-p 0.33`)."""
    plain, percent = parse_share("0.33"), parse_share("33%")
    assert plain == percent
    assert [plain.describe(), percent.describe(), plain.describe()] == ["0.33 GPU", "33% of a GPU", "0.33 GPU"]
    assert (plain.to_dict()["percent"], percent.to_dict()["percent"]) == (False, True)
    whole, whole_float = SliceRequest(fraction=1), SliceRequest(fraction=1.0)
    assert (type(whole.to_dict()["fraction"]), type(whole_float.to_dict()["fraction"])) == (int, float)


@given(st.floats(min_value=1e-6, max_value=1.0, allow_nan=False))
def test_a_described_share_reads_back_as_the_same_share(fraction: float) -> None:
    text = describe_fraction(fraction)
    assert "%" not in text
    assert parse_fraction(text) == pytest.approx(fraction, rel=1e-5)
