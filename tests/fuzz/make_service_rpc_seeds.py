#!/usr/bin/env python3
"""make_service_rpc_seeds.py: writes the seed corpus of tests/fuzz/fuzz_service_rpc.c.

Each seed is a script of records (op, sel, u16 LE length, bytes; the layout is in the target's
header comment). The service is fresh for every input, so ids are predictable: the first
session's first buffer is 1, its first data source instance 1, its first flush request 1.
  record-session     bind, EnableTracing of a track_event buffer, a producer that initializes,
                     opens GetAsyncCommand, registers track_event and a trace writer, writes one
                     chunk into the SMB the service sent it and commits it, a Flush answered by
                     CommitData, DisableTracing, NotifyDataSourceStopped, ReadBuffers, FreeBuffers
  detach-attach      a session detached by key, the consumer reconnects and attaches, reads
  clone-observe      a second (unprivileged) consumer observes, queries state and stats, clones
  triggers           a STOP_TRACING trigger session, ActivateTriggers, the trigger timer fired
  write-into-file    write_into_file with an output descriptor, the write timer fired
  producer-smb       InitializeConnection with the producer's own SMB (a descriptor), a commit
  deferred-change    deferred_start, ChangeTraceConfig, StartTracing, UpdateDataSource,
                     UnregisterDataSource, UnregisterTraceWriter, Sync, SaveTraceForBugreport
  relay              RelayPort: InitRelay and SyncClock
  raw-frames         raw IPC frames: an empty frame, a reply sent to the service, an unknown
                     service and method, a bind of an unknown name, an oversized header

Usage: tests/fuzz/make_service_rpc_seeds.py (writes tests/fuzz/corpus/fuzz_service_rpc/ next to
this script)."""
import os
import struct

from seed_pb import varint  # (run as a script, its own directory is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "fuzz_service_rpc")

# connections
CA, PA, CB, PB = 0, 1, 2, 3
# record kinds (op bits 2-4)
BIND, CALL, RAW, FRAME, STREAM, CONNECT, TIMER, SMB = range(8)
BIT6, DROP, FD = 0x40, 0x20, 0x80

CONSUMER = ["EnableTracing", "DisableTracing", "ReadBuffers", "FreeBuffers", "Flush", "StartTracing",
            "ChangeTraceConfig", "Detach", "Attach", "GetTraceStats", "ObserveEvents", "QueryServiceState",
            "QueryCapabilities", "SaveTraceForBugreport", "CloneSession"]
PRODUCER = ["InitializeConnection", "RegisterDataSource", "UnregisterDataSource", "CommitData",
            "GetAsyncCommand", "RegisterTraceWriter", "UnregisterTraceWriter", "NotifyDataSourceStarted",
            "NotifyDataSourceStopped", "ActivateTriggers", "Sync", "UpdateDataSource", "InitRelay", "SyncClock"]


def vf(num, v):
    return varint(num << 3) + varint(v)


def lf(num, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def rec(op, sel=0, body=b""):
    return struct.pack("<BBH", op, sel, len(body)) + body


def call(conn, method, args=b"", flags=0, fd_sel=0):
    names = PRODUCER if conn in (PA, PB) else CONSUMER
    return rec(conn | CALL << 2 | flags, names.index(method) | fd_sel, args)


def bind(conn, flags=0, name=b""):
    return rec(conn | BIND << 2 | flags, 0, name)


def trace_config(size_kb=1024, ds="track_event", extra=b""):
    buf = lf(1, vf(1, size_kb))
    dsc = lf(2, lf(1, lf(1, ds) + vf(2, 0)))
    return buf + dsc + extra


def enable(cfg):
    return lf(1, cfg)


def init_conn(name="fuzzprod", extra=b""):
    return vf(1, 4096) + vf(2, 65536) + lf(3, name) + vf(4, 1) + extra


def register_ds(name="track_event"):
    return lf(1, lf(1, name))


def chunk_page(chunk_id=0, writer=1, packets=None):
    """Page 0 of an SMB: a DIV1 page header with chunk 0 complete, then the chunk."""
    if packets is None:
        ev = lf(23, "slice") + vf(9, 1)  # TrackEvent{name, type: SLICE_BEGIN}
        packets = [vf(8, 1000) + lf(11, ev), vf(8, 2000) + lf(11, vf(9, 2))]
    body = b"".join(varint(len(p)) + p for p in packets)
    hdr = struct.pack("<IHH", chunk_id, writer, len(packets))
    return struct.pack("<II", 1 << 28 | 3, 0) + hdr + body


def commit_move(page=0, chunk=0, buffer=1, flush_id=None):
    r = lf(1, vf(1, page) + vf(2, chunk) + vf(3, buffer))
    if flush_id is not None:
        r += vf(3, flush_id)
    return r


def producer_setup(conn=PA, ds="track_event"):
    return (bind(conn) + call(conn, "InitializeConnection", init_conn()) + call(conn, "GetAsyncCommand") +
            call(conn, "RegisterDataSource", register_ds(ds)))


def producer_writes(conn=PA, buffer=1, instance=1):
    return (call(conn, "NotifyDataSourceStarted", vf(1, instance)) +
            call(conn, "RegisterTraceWriter", vf(1, 1) + vf(2, buffer)) +
            rec(conn | SMB << 2, 0, chunk_page()) + call(conn, "CommitData", commit_move(buffer=buffer)))


SEEDS = {}

SEEDS["record-session"] = (
    bind(CA) + producer_setup() + call(CA, "EnableTracing", enable(trace_config())) + producer_writes() +
    call(CA, "Flush", vf(1, 5000)) + call(PA, "CommitData", vf(3, 1)) + call(CA, "DisableTracing") +
    call(PA, "NotifyDataSourceStopped", vf(1, 1)) + call(CA, "ReadBuffers") + call(CA, "FreeBuffers", vf(1, 1)))

SEEDS["detach-attach"] = (
    bind(CA) + producer_setup() + call(CA, "EnableTracing", enable(trace_config())) + producer_writes() +
    call(CA, "Detach", lf(1, "fuzzkey")) + rec(CA | CONNECT << 2) + bind(CA) + call(CA, "Attach", lf(1, "fuzzkey")) +
    call(CA, "EnableTracing", vf(2, 1)) + call(CA, "GetTraceStats") + call(CA, "DisableTracing") +
    rec(CA | TIMER << 2) + call(CA, "ReadBuffers"))

SEEDS["clone-observe"] = (
    bind(CA) + bind(CB) + call(CB, "ObserveEvents", vf(1, 1) + vf(1, 2) + vf(1, 4)) + producer_setup() +
    call(CA, "EnableTracing", enable(trace_config(extra=lf(22, "uniq")))) + producer_writes() +
    call(CA, "QueryServiceState") + call(CB, "QueryServiceState", vf(1, 1)) + call(CA, "GetTraceStats") +
    call(CA, "CloneSession", vf(1, 1), FD) + call(CB, "CloneSession", lf(4, "uniq")) +
    rec(CA | TIMER << 2, 0) + rec(CA | TIMER << 2, 1) + call(CB, "ReadBuffers") + call(CA, "ReadBuffers"))

trig = lf(17, vf(1, 2) + lf(2, lf(1, "boom") + vf(3, 0)) + vf(3, 60000))
SEEDS["triggers"] = (
    bind(CA) + producer_setup() + call(CA, "EnableTracing", enable(trace_config(extra=trig))) +
    producer_writes() + call(PA, "ActivateTriggers", lf(1, "boom") + lf(1, "other")) + rec(CA | TIMER << 2) +
    rec(CA | TIMER << 2, 1) + call(PA, "NotifyDataSourceStopped", vf(1, 1)) + call(CA, "ReadBuffers"))

wif = vf(8, 1) + vf(9, 100) + vf(10, 1 << 20)
SEEDS["write-into-file"] = (
    bind(CA) + producer_setup() + call(CA, "EnableTracing", enable(trace_config(extra=wif)), FD) +
    producer_writes() + rec(CA | TIMER << 2, 0) + rec(CA | TIMER << 2, 1) + call(CA, "DisableTracing") +
    call(PA, "NotifyDataSourceStopped", vf(1, 1)) + rec(CA | TIMER << 2, 0))

SEEDS["producer-smb"] = (
    bind(CA) + bind(PB) + call(PB, "InitializeConnection", init_conn("own-smb", vf(6, 1)), FD, 0x40) +
    call(PB, "GetAsyncCommand") + call(PB, "RegisterDataSource", register_ds()) +
    call(CA, "EnableTracing", enable(trace_config())) + producer_writes(PB) + call(CA, "DisableTracing") +
    rec(CA | TIMER << 2) + call(CA, "ReadBuffers"))

SEEDS["deferred-change"] = (
    bind(CA) + producer_setup() + producer_setup(PB, "other") +
    call(CA, "EnableTracing", enable(trace_config(extra=vf(12, 1) + vf(13, 1000) + lf(21, vf(1, 500))))) +
    call(CA, "ChangeTraceConfig", lf(1, trace_config(ds="other"))) + call(CA, "StartTracing") +
    call(PA, "UpdateDataSource", register_ds()) + producer_writes() + call(PA, "UnregisterTraceWriter", vf(1, 1)) +
    call(PA, "UnregisterDataSource", lf(1, "track_event")) + call(PA, "Sync") + call(CA, "SaveTraceForBugreport") +
    rec(CA | TIMER << 2, 2) + call(CA, "QueryCapabilities") + call(CA, "DisableTracing", flags=DROP))

SEEDS["relay"] = (
    bind(PB, BIT6) + call(PB, "InitRelay", lf(1, lf(1, lf(1, "Linux") + lf(4, "x86_64")) + vf(8, 2))) +
    call(PB, "SyncClock", vf(1, 1) + lf(2, vf(1, 6) + vf(2, 123456)) + lf(2, vf(1, 1) + vf(2, 999))) +
    call(PB, "SyncClock", vf(1, 2)) + bind(CA) + producer_setup() +
    call(CA, "EnableTracing", enable(trace_config())) + call(CA, "QueryServiceState"))

bad_header = struct.pack("<I", 1 << 20)
SEEDS["raw-frames"] = (
    bind(CA) + rec(CA | FRAME << 2, 0, b"") + rec(CA | FRAME << 2, 0, vf(2, 7) + lf(6, vf(1, 1))) +
    rec(CA | FRAME << 2, 0, vf(2, 8)) + rec(CA | RAW << 2 | BIT6, 3, b"") + rec(CA | RAW << 2, 99, b"\x0a\x05") +
    bind(CB, BIT6, b"NoSuchPort") + rec(PA | STREAM << 2, 0, struct.pack("<I", 20) + vf(2, 1)) +
    rec(PA | STREAM << 2, 0, lf(3, lf(1, "ProducerPort")) + b"\0" * 10) + rec(PB | STREAM << 2, 0, bad_header) +
    rec(PB | CONNECT << 2) + bind(PB) + call(PB, "CommitData", b"\xff\xff") + rec(CB | CONNECT << 2 | BIT6))


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
