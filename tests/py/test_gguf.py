"""`loom info --json` agrees with the gguf package's GGUFReader on both reference models:
every metadata key and scalar value, every tensor's name, type, shape, offset and byte size."""
import json

import gguf
import numpy as np
import pytest

from conftest import run_loom


def reader_scalar(field):
    t = field.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
    return field.parts[field.data[0]].tolist()[0]


def test_info_matches_gguf_package(loom_bin, model):
    info = json.loads(run_loom(loom_bin, "info", "--json", model).stdout)
    reader = gguf.GGUFReader(str(model))

    # Metadata: same keys in the same order (the reader adds GGUF.* pseudo keys).
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert list(info["metadata"].keys()) == keys
    for key in keys:
        field = reader.fields[key]
        ours = info["metadata"][key]
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            n = len(field.data)
            if isinstance(ours, dict):
                assert ours["length"] == n, key
            else:
                assert len(ours) == n, key
            continue
        theirs = reader_scalar(field)
        if isinstance(theirs, float):
            assert ours == pytest.approx(theirs, rel=1e-7), key
        else:
            assert ours == theirs, key

    # Tensors: order, names, types, shapes, offsets and sizes.
    assert len(info["tensors"]) == len(reader.tensors)
    for ours, t in zip(info["tensors"], reader.tensors):
        assert ours["name"] == t.name
        assert ours["type"].lower() == t.tensor_type.name.lower()
        assert ours["shape"] == [int(x) for x in t.shape]
        assert ours["bytes"] == int(t.n_bytes)
        assert info["data_offset"] + ours["offset"] == int(t.data_offset)
    assert info["total_elements"] == sum(int(np.prod(t.shape)) for t in reader.tensors)


def test_info_text_names_architecture_and_template(loom_bin, model):
    out = run_loom(loom_bin, "info", model).stdout
    arch = json.loads(run_loom(loom_bin, "info", "--json", model).stdout)["architecture"]
    assert f"architecture:  {arch}" in out
    assert "chat template:" in out
    assert "token_embd.weight" in out


@pytest.mark.parametrize("content,needle", [
    (b"", "magic"),
    (b"GGUF\x01\x00\x00\x00" + b"\x00" * 16, "version 1"),
    (b"not a model at all, just text\n", "not a GGUF file"),
])
def test_bad_files_fail_cleanly(loom_bin, tmp_path, content, needle):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    r = run_loom(loom_bin, "info", p, check=False)
    assert r.returncode == 1
    assert needle in r.stderr and str(p) in r.stderr
    assert r.stderr.count("\n") == 1


def test_missing_file(loom_bin, tmp_path):
    r = run_loom(loom_bin, "info", tmp_path / "nope.gguf", check=False)
    assert r.returncode == 1 and "no such file" in r.stderr
