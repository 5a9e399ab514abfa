"""seed_pb.py: protobuf wire encoding for the Python seed generators in tests/fuzz
(make_frame_scan_diff_seeds.py, make_smb_bridge_seeds.py)."""


def varint(v):
    """v (a non-negative int) as a base-128 varint."""
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)
