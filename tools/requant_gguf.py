#!/usr/bin/env python3
"""Write a copy of a GGUF file with its quantized weight matrices in another format.

    python3 tools/requant_gguf.py IN.gguf OUT.gguf --type q4_0 [--only Q4_1]

Every tensor of a source type given by --only (default: every quantized 2-D tensor except
token_embd and output) is dequantized and quantized again with the PyPI `gguf` package's
reference quantizers; the rest and every metadata key are copied unchanged (general.file_type
is set to the new type). Used to get real-weight files in the formats the benchmarks compare
(e.g. SmolLM2-135M-Instruct in Q4_0 from its Q4_1 release), whose distributions, unlike the
synthetic files', are a trained model's. The weights carry two roundings, so quality figures
of such a file are not the format's; comparisons between engines on it are fair.
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import quants

TYPES = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q4_1": gguf.GGMLQuantizationType.Q4_1,
         "q5_0": gguf.GGMLQuantizationType.Q5_0, "q5_1": gguf.GGMLQuantizationType.Q5_1,
         "q8_0": gguf.GGMLQuantizationType.Q8_0}
# general.file_type values (llama.cpp's LLAMA_FTYPE_MOSTLY_*).
FILE_TYPES = {"q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "q8_0": 7}
SKIP = ("token_embd.weight", "output.weight")


def field_value(field):
    """A reader field's value in the form GGUFWriter.add_key_value takes, and its element type."""
    types = field.types
    if types[0] == gguf.GGUFValueType.ARRAY:
        sub = types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data], sub
        return [field.parts[i].tolist()[0] for i in field.data], sub
    if types[0] == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), None
    return field.parts[field.data[0]].tolist()[0], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", required=True, choices=sorted(TYPES))
    ap.add_argument("--only", default="", help="source types to convert, comma-separated (e.g. Q4_1)")
    a = ap.parse_args()
    dst_type = TYPES[a.type]
    only = {s.strip().upper() for s in a.only.split(",") if s.strip()}
    r = gguf.GGUFReader(a.src)
    arch = bytes(r.fields["general.architecture"].parts[r.fields["general.architecture"].data[0]]).decode()
    w = gguf.GGUFWriter(a.dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value, sub = field_value(field)
        if name == "general.file_type":
            value = FILE_TYPES[a.type]
        w.add_key_value(name, value, field.types[0], sub_type=sub)
    converted = 0
    for t in r.tensors:
        src_type = t.tensor_type
        quantized = src_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                                     gguf.GGMLQuantizationType.BF16)
        convert = (src_type.name in only) if only else (quantized and len(t.shape) == 2 and t.name not in SKIP)
        if not convert or src_type == dst_type:
            w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=src_type)
            continue
        values = quants.dequantize(t.data, src_type).astype(np.float32)
        data = quants.quantize(values, dst_type)
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=dst_type)
        converted += 1
        print(f"requant: {t.name} {src_type.name} -> {dst_type.name}", flush=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"requant: {converted} tensors converted; wrote {a.dst}")
    if converted == 0:
        sys.exit("requant: no tensor matched")


if __name__ == "__main__":
    main()
