"""Hostile inputs: profiles of the wrong shape.

Every malformed profile (bytes, a number, a binary file, a directory, a mapping or file whose
entries are not lists of names) gets our own ``TypeError`` / ``ValueError`` naming the problem and
the accepted forms, and leaves the active profile unchanged.
"""

from __future__ import annotations

import json

import pytest
import torch

import openreg_lab

FORMS = "a list of operator names, a mapping of such lists"


@pytest.fixture(autouse=True)
def _no_profile_before_or_after():
    assert openreg_lab.get_profile() is None
    yield
    assert openreg_lab.get_profile() is None  # a refused profile changes nothing


@pytest.mark.parametrize(
    ("profile", "error", "message"),
    [
        (b"cpu", TypeError, r"a profile cannot be bytes \(decode it to a name or a path first\)"),
        (bytearray(b"cpu"), TypeError, "a profile cannot be bytearray"),
        (42, TypeError, "a profile cannot be int: choose one of minimal"),
        ([b"aten::add.Tensor"], TypeError, r"operator names are strings like 'aten::add.Tensor'; got bytes"),
        ([1, 2], TypeError, "operator names are strings like 'aten::add.Tensor'; got int 1"),
        ({"binary": "aten::add.Tensor"}, TypeError, r"profile, entry 'binary', must be a list of operator"),
        ({"binary": [3]}, TypeError, r"profile, entry 'binary',: operator names are strings"),
        ("aten::add.Tensor", ValueError, r"for one operator, pass a list: \['aten::add.Tensor'\]"),
        ("no/such/profile.yaml", ValueError, r"unknown profile 'no/such/profile.yaml' \(no such file\)"),
    ],
    ids=[
        "bytes",
        "bytearray",
        "int",
        "bytes-name",
        "int-names",
        "dict-of-str",
        "dict-of-ints",
        "one-op-string",
        "missing-file",
    ],
)
def test_a_malformed_profile_is_refused_naming_the_problem(profile, error, message):
    with pytest.raises(error, match=message):
        openreg_lab.set_profile(profile)


def test_a_mapping_of_lists_is_a_profile_like_native_ops_yaml():
    x = torch.randn(3).to("openreg")
    with openreg_lab.use_profile({"binary": ["aten::atan2"], "empty": None}):
        assert openreg_lab.get_profile() == "custom"
        assert torch.allclose(torch.atan2(x, x).cpu(), torch.atan2(x.cpu(), x.cpu()))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", r"is not a text file \(it is not UTF-8\)"),
        (b"just a string\n", "must hold a list of operator names or a mapping of such lists; got str"),
        (b"binary: aten::atan2\n", r"entry 'binary', must hold a list of operator names; got str"),
        (b"[aten::atan2\n", "is not valid YAML or JSON"),
        (b"- 7\n", r"operator names are strings like 'aten::add.Tensor'; got int 7"),
    ],
    ids=["binary", "scalar", "mapping-of-str", "broken-yaml", "number-name"],
)
def test_a_malformed_profile_file_gets_a_value_error(tmp_path, content, message):
    path = tmp_path / "profile.yaml"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        openreg_lab.set_profile(path)


def test_a_json_profile_file_is_read(tmp_path):
    path = tmp_path / "ops.json"
    path.write_text(json.dumps({"binary": ["aten::atan2"]}))
    with openreg_lab.use_profile(path):
        assert openreg_lab.get_profile() == "ops.json"


def test_a_directory_is_not_a_profile(tmp_path):
    with pytest.raises(ValueError, match=f"profile '{tmp_path}' is a directory: choose one of"):
        openreg_lab.set_profile(tmp_path)


def test_bytes_paths_are_refused(tmp_path):
    import pathlib

    class BytesPath:
        def __fspath__(self) -> bytes:
            return bytes(pathlib.Path(tmp_path) / "x.yaml")

    with pytest.raises(TypeError, match="a profile path must be text"):
        openreg_lab.set_profile(BytesPath())  # type: ignore[arg-type]
