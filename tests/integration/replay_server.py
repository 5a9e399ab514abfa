#!/usr/bin/env python3
# replay_server.py: serves one recorded Perfetto service conversation (shared/interop/recordings/*.bin)
# on a UNIX socket: it reads the client's frames and answers each with the service bytes the real
# traced sent at that point, then closes. Used to check tracegate's clients against real answers.
import os, socket, struct, sys

def records(path):
    data = open(path, 'rb').read()
    i = 0
    while i + 6 <= len(data):
        d, nfds, n = data[i], data[i + 1], struct.unpack('<I', data[i + 2:i + 6])[0]
        yield d, data[i + 6:i + 6 + n]
        i += 6 + n

def frames(buf):
    out, i = [], 0
    while i + 4 <= len(buf):
        n = struct.unpack('<I', buf[i:i + 4])[0]
        if i + 4 + n > len(buf):
            break
        out.append(buf[i:i + 4 + n])
        i += 4 + n
    return out, buf[i:]

def main():
    rec, sock_path = sys.argv[1], sys.argv[2]
    # group the conversation into steps: (client frames expected, service bytes to send after them)
    steps, client, service = [], b'', b''
    for d, b in records(rec):
        if d == 0:
            if service:
                steps.append((len(frames(client)[0]), service))
                service = b''
            client += b
        elif d == 1:
            service += b
    if service:
        steps.append((len(frames(client)[0]), service))
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(1)
    print('ready', flush=True)
    conn, _ = srv.accept()
    # a safety net, scaled like the other tests' deadlines (TG_TEST_TIMEOUT_SCALE, default 4)
    conn.settimeout(10 * float(os.environ.get('TG_TEST_TIMEOUT_SCALE') or 4))
    got, pending = 0, b''
    for need, out in steps:
        while got < need:
            chunk = conn.recv(65536)
            if not chunk:
                return
            fr, pending = frames(pending + chunk)
            got += len(fr)
        conn.sendall(out)
    conn.close()

if __name__ == '__main__':
    main()
