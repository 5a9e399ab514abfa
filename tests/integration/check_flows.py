#!/usr/bin/env python3
"""check_flows.py: reads `protoc --decode_raw` output of a .pftrace on stdin (Perfetto's Trace
message: field 1 = TracePacket; TracePacket field 11 = TrackEvent with 9 type, 11 track_uuid,
23 name, 47 flow_ids, 48 terminating_flow_ids) and prints one line per flow: "FROM -> TO",
the names of the slices that start and end it. Exits 1 if a terminating id has no start or both
ends sit on the same track. Only facts from the Perfetto wire facts are used."""
import re
import sys

packets = []  # (track_uuid, type, name, [flow ids], [terminating ids])
cur = None
for line in sys.stdin:
    indent = len(line) - len(line.lstrip(" "))
    s = line.strip()
    if indent == 0 and s == "1 {":
        cur = {"te": False, "uuid": None, "type": None, "name": None, "out": [], "in": []}
        packets.append(cur)
    elif indent == 2 and s == "11 {" and cur is not None:
        cur["te"] = True
    elif indent == 4 and cur is not None and cur["te"]:
        m = re.match(r"^(\d+): (.*)$", s)
        if not m:
            continue
        f, v = int(m.group(1)), m.group(2)
        if f == 11:
            cur["uuid"] = int(v)
        elif f == 9:
            cur["type"] = int(v)
        elif f == 23:
            cur["name"] = v.strip('"')
        elif f == 47:
            cur["out"].append(int(v, 16))
        elif f == 48:
            cur["in"].append(int(v, 16))

starts = {}
for p in packets:
    if p["te"] and p["type"] == 1:
        for fid in p["out"]:
            starts.setdefault(fid, p)
bad = 0
for p in packets:
    if not (p["te"] and p["type"] == 1):
        continue
    for fid in p["in"]:
        s = starts.get(fid)
        if s is None:
            print("flow %x ends at %s without a start" % (fid, p["name"]))
            bad = 1
        elif s["uuid"] == p["uuid"]:
            print("flow %x starts and ends on one track" % fid)
            bad = 1
        else:
            print("%s -> %s" % (s["name"], p["name"]))
sys.exit(bad)
