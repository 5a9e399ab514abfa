#!/usr/bin/env python3
"""make_frame_scan_diff_seeds.py: writes the seed corpus of tests/fuzz/fuzz_frame_scan_diff.c.

Seeds are single IPCFrame bodies:
  rec-*     the first frame of each shape (direction, msg member, method id) in the interop
            recordings (real Perfetto clients and traced), up to 4 KiB;
  attack-*  the parser-differential attacks of tests/unit/test_frame_scan_strict.c and
            tests/unit/test_gw_bridge.c (frames Perfetto reads differently from a varint-only or
            first-wins reader).

Usage: tests/fuzz/make_frame_scan_diff_seeds.py [RECORDINGS_DIR]
(default: $TG_SHARED_DIR/interop/recordings, else ../shared/interop/recordings next to the
source tree). Writes tests/fuzz/corpus/fuzz_frame_scan_diff/ next to this script."""
import os
import struct
import sys

from seed_pb import varint  # (run as a script, its own directory is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz_frame_scan_diff")


def key(num, wire):
    return varint(num << 3 | wire)


def f_varint(num, v):
    return key(num, 0) + varint(v)


def f_fixed32(num, v):
    return key(num, 5) + struct.pack("<I", v)


def f_fixed64(num, v):
    return key(num, 1) + struct.pack("<Q", v)


def f_bytes(num, b):
    return key(num, 2) + varint(len(b)) + b


def invoke(rid_bytes, inner):
    return rid_bytes + f_bytes(5, inner)


def attacks():
    rid2 = f_varint(2, 2)
    qss = f_varint(1, 1) + f_varint(2, 12)
    private = (1 << 63) | 1
    method_info = lambda i, n: f_bytes(3, f_varint(1, i) + f_bytes(2, n))
    return {
        "attack-method-id-fixed32": invoke(rid2, qss + f_fixed32(2, 1)),
        "attack-method-id-twice": invoke(rid2, qss + f_varint(2, 1)),
        "attack-method-id-fixed64": invoke(rid2, f_varint(1, 1) + f_fixed64(2, 1)),
        "attack-service-id-len": invoke(rid2, f_bytes(1, b"\x01") + f_varint(2, 12)),
        "attack-drop-reply-fixed32": invoke(rid2, qss + f_fixed32(4, 1)),
        "attack-args-twice": invoke(rid2, f_varint(1, 1) + f_varint(2, 4) + f_bytes(3, b"") + f_bytes(3, b"\x0a\x00")),
        "attack-request-id-fixed64-private": invoke(f_fixed64(2, private), qss),
        "attack-request-id-varint-then-fixed64": invoke(rid2 + f_fixed64(2, private), qss),
        "attack-request-id-twice": invoke(rid2, qss) + f_varint(2, 8),
        "attack-unknown-envelope-field": invoke(rid2, qss) + f_varint(9, 1),
        "attack-unknown-invoke-field": invoke(rid2, qss + f_varint(7, 1)),
        "attack-unknown-bind-field": f_varint(2, 1) + f_bytes(3, f_bytes(1, b"ConsumerPort") + f_varint(2, 1)),
        "attack-big-field-id": invoke(rid2, qss) + f_bytes(70000, b"x"),
        "attack-bind-and-invoke": invoke(rid2, qss) + f_bytes(3, f_bytes(1, b"ProducerPort")),
        "attack-invoke-twice": invoke(rid2, f_varint(1, 1) + f_varint(2, 1)) + f_bytes(5, f_varint(2, 12)),
        "attack-member-as-varint": f_varint(2, 1) + f_varint(3, 0),
        "attack-service-name-twice": f_varint(2, 1) + f_bytes(3, f_bytes(1, b"ConsumerPort") + f_bytes(1, b"ProducerPort")),
        "attack-invoke-truncated-args": invoke(rid2, qss + b"\x1a"),
        "attack-reply-has-more-fixed32": f_varint(2, 4) + f_bytes(6, f_varint(1, 1) + f_varint(2, 1) + f_fixed32(2, 0)),
        "attack-reply-success-twice": f_varint(2, 4) + f_bytes(6, f_varint(1, 0) + f_varint(1, 1)),
        "attack-bind-reply-dup-method-id": f_varint(2, 1) + f_bytes(4, f_varint(1, 1) + f_varint(2, 1)
                                                                     + method_info(1, b"QueryServiceState")
                                                                     + method_info(1, b"EnableTracing")),
        "attack-bind-reply-id-twice-in-info": f_varint(2, 1) + f_bytes(4, f_varint(1, 1) + f_varint(2, 1)
                                                                        + f_bytes(3, f_varint(1, 12) + f_bytes(2, b"QueryServiceState") + f_varint(1, 1))),
        "attack-bind-reply-id-fixed32": f_varint(2, 1) + f_bytes(4, f_varint(1, 1) + f_varint(2, 1)
                                                                  + f_bytes(3, f_fixed32(1, 12) + f_bytes(2, b"QueryServiceState"))),
    }


def frames_of(stream):
    pos = 0
    while len(stream) - pos >= 4:
        (n,) = struct.unpack_from("<I", stream, pos)
        pos += 4
        if n > len(stream) - pos:
            return
        if n:
            yield stream[pos:pos + n]
        pos += n


def read_varint(b, pos):
    v = shift = 0
    while True:
        c = b[pos]
        pos += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, pos


def shape(body):
    """(msg member, method id) of a frame: enough to keep one seed per kind."""
    pos, member, method = 0, 0, 0
    while pos < len(body):
        k, pos = read_varint(body, pos)
        num, wire = k >> 3, k & 7
        if wire == 0:
            _, pos = read_varint(body, pos)
        elif wire == 2:
            n, pos = read_varint(body, pos)
            if 3 <= num <= 8:
                member = num
                if num == 5:
                    sub, spos = body[pos:pos + n], 0
                    while spos < len(sub):
                        sk, spos = read_varint(sub, spos)
                        if sk & 7 == 0:
                            v, spos = read_varint(sub, spos)
                            if sk >> 3 == 2:
                                method = v
                        elif sk & 7 == 2:
                            sn, spos = read_varint(sub, spos)
                            spos += sn
                        else:
                            break
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            break
    return member, method


def recordings(rec_dir):
    seeds = {}
    for name in sorted(os.listdir(rec_dir)):
        if not name.endswith(".bin"):
            continue
        raw = open(os.path.join(rec_dir, name), "rb").read()
        streams = [bytearray(), bytearray()]
        pos = 0
        while len(raw) - pos >= 6:
            d, _nfds, n = struct.unpack_from("<BBI", raw, pos)
            pos += 6
            if d < 2:
                streams[d] += raw[pos:pos + n]
            pos += n
        for d in (0, 1):
            for body in frames_of(bytes(streams[d])):
                if len(body) > 4096:
                    continue  # big ReadBuffers/CommitData frames add nothing to the envelope
                member, method = shape(body)
                tag = "rec-%s-m%d-%d" % ("c2s" if d == 0 else "s2c", member, method)
                seeds.setdefault(tag, body)
    return seeds


def main():
    rec_dir = sys.argv[1] if len(sys.argv) > 1 else None
    if not rec_dir:
        shared = os.environ.get("TG_SHARED_DIR") or os.path.join(HERE, "..", "..", "..", "shared")
        rec_dir = os.path.join(shared, "interop", "recordings")
    os.makedirs(OUT, exist_ok=True)
    seeds = recordings(rec_dir)
    seeds.update(attacks())
    for name, body in sorted(seeds.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(body)
    print("%d seeds in %s" % (len(seeds), OUT))


if __name__ == "__main__":
    main()
