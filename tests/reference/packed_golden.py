"""packed_golden.py (stdlib only) — a packed dataset against golden documents, for tests/cli/unit_prepare_chat.sh and
unit_prepare_formats.sh: read_dumped reads /tokens, /loss_mask and /doc_offsets of H5 from the raw little-endian
files that `h5dump -b LE` wrote next to it (H5.tokens.bin, H5.loss_mask.bin, H5.doc_offsets.bin; dump_packed in
tests/prepare_common.sh), mismatches compares them with the golden documents ({"ids": [...], "loss_mask": [...]})."""
import struct


def read_dumped(h5):
    """The tokens, loss_mask and doc_offsets of h5, as lists."""
    def raw(d, fmt, size):
        b = open(f"{h5}.{d}.bin", "rb").read()
        return list(struct.unpack(f"<{len(b) // size}{fmt}", b))
    return raw("tokens", "I", 4), raw("loss_mask", "B", 1), raw("doc_offsets", "Q", 8)


def mismatches(docs, tok, mask, off):
    """How many of doc_offsets and the documents' tokens and loss masks differ from docs; prints each one."""
    want = [0]
    for d in docs: want.append(want[-1] + len(d["ids"]))
    bad = 0
    if off != want:
        print(f"doc_offsets {off} != {want}"); bad += 1
    for i, d in enumerate(docs):
        a, b = want[i], want[i + 1]
        if tok[a:b] != d["ids"]:
            print(f"document {i}: tokens\n  ours {tok[a:b]}\n  gold {d['ids']}"); bad += 1
        if mask[a:b] != d["loss_mask"]:
            print(f"document {i}: loss_mask\n  ours {mask[a:b]}\n  gold {d['loss_mask']}"); bad += 1
    return bad
