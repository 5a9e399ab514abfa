#!/usr/bin/env python3
"""make_smb_bridge_seeds.py: writes the seed corpus of tests/fuzz/fuzz_smb_bridge.c.

Each seed is the target's 4-byte prefix (geometry, mode, busy pages) and a payload:
  commit-*  CommitData requests as a remote producer in emulation mode sends them: whole chunks
            (8-byte header, then fragments), one scraped while still written (chunk_incomplete),
            patches and a flush ack; also against a full SMB, and with chunks that do not fit;
  reply-*   an InitializeConnection reply and a SetupTracing command from the service.

Usage: tests/fuzz/make_smb_bridge_seeds.py (writes tests/fuzz/corpus/fuzz_smb_bridge/ next to
this script)."""
import os
import struct

from seed_pb import varint  # (run as a script, its own directory is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz_smb_bridge")


def field(num, wire, payload):
    if wire == 0:
        return varint(num << 3) + varint(payload)
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def chunk(chunk_id, writer, packets, size, flags=0):
    """A chunk image: header, then `packets` fragments of 20 bytes, zero up to size."""
    body = bytearray(struct.pack("<IHH", chunk_id, writer, packets | flags << 10))
    for i in range(packets):
        pkt = field(8, 0, 1000 + i) + field(900, 2, bytes([i]) * 12)
        body += bytes([0x80 | len(pkt), 0x80, 0x80, 0x00]) + pkt
    return bytes(body) + bytes(max(0, size - len(body)))


def move(data, target=1, page=0, chunk_idx=0, incomplete=False):
    m = field(1, 0, page) + field(2, 0, chunk_idx) + field(3, 0, target) + field(4, 2, data)
    if incomplete:
        m += field(5, 0, 1)
    return field(1, 2, m)


def patch(writer, chunk_id, offset):
    p = field(1, 0, offset) + field(2, 2, b"\x85\x80\x80\x00")
    return field(2, 2, field(1, 0, 1) + field(2, 0, writer) + field(3, 0, chunk_id) + field(4, 2, p))


def prefix(page_code, pages, mode, busy):
    return bytes([page_code | (pages - 1) << 2, mode]) + struct.pack("<H", busy)


def main():
    os.makedirs(OUT, exist_ok=True)
    c4 = 4088  # a Div1 chunk of a 4 KiB page
    seeds = {
        "commit-two-chunks": prefix(0, 4, 0, 0)
        + move(chunk(0, 1, 3, c4)) + move(chunk(1, 1, 2, c4), page=1) + field(3, 0, 7),
        "commit-incomplete": prefix(0, 4, 0, 0)
        + move(chunk(2, 1, 2, c4)) + move(chunk(3, 1, 2, 300, flags=2), page=9, incomplete=True),
        "commit-patches": prefix(0, 2, 0, 0)
        + move(chunk(4, 2, 1, c4, flags=4)) + patch(2, 4, 8) + field(3, 0, 9),
        "commit-smb-full": prefix(0, 2, 0, 3) + move(chunk(5, 1, 1, c4)),
        "commit-half-full-div2": prefix(0, 3, 2, 5) + move(chunk(6, 1, 1, 100)) + move(chunk(7, 1, 1, c4)),
        "commit-too-big": prefix(0, 2, 0, 0) + move(chunk(8, 1, 1, c4 + 8)),
        "commit-no-target": prefix(0, 2, 0, 0) + field(1, 2, field(4, 2, chunk(9, 1, 1, 64))),
        "commit-64k-pages": prefix(3, 2, 0, 0) + move(chunk(10, 3, 4, 65528)),
        "reply-init": prefix(0, 1, 1 | 4, 0) + field(2, 0, 1) + field(3, 0, 0),
        "reply-setup-tracing": prefix(0, 4, 1, 0) + field(3, 2, field(1, 0, 4)),
        "reply-setup-bad-size": prefix(1, 4, 1 | 8, 0) + field(3, 2, field(1, 0, 8)),
    }
    for name, blob in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
