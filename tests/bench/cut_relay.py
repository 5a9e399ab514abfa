#!/usr/bin/env python3
"""cut_relay.py: a loopback TCP relay that link_bench.sh cuts and restores (docs/benchmarks.md).

    cut_relay.py LISTEN_PORT TARGET_PORT

Relays every connection accepted on 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT (one thread
per direction). Signals:
    SIGUSR1  cut: close every relayed connection (both ends see the close at once); connections
             accepted while cut are held, not forwarded (the dialer's retry is pending)
    SIGHUP   cut and refuse: as SIGUSR1, and the listening socket is closed (dials are refused,
             so the dialer backs off)
    SIGUSR2  restore: held connections are connected to the target, the listener reopened
    SIGTERM  exit
Prints `ready`, `cut T`, `restore T` lines; T is time.monotonic() (CLOCK_MONOTONIC, the clock
bench_gw's --stalls prints) taken when the state changed. Loopback only. (The integration tests'
relay, tests/integration/link_relay.py, is driven over a FIFO and refuses dials while cut; this
one can also hold a redial pending, and stamps its changes for timing.)
"""
import signal
import socket
import sys
import threading
import time

LISTEN, TARGET = int(sys.argv[1]), int(sys.argv[2])
lock = threading.Lock()
state = "up"        # up | hold | refuse
pairs = []          # [client socket, target socket] being relayed
held = []           # client sockets accepted while cut
listener = None


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def pump(src, dst):
    try:
        while True:
            data = src.recv(262144)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):  # one side ended: end both (a link is useless half-open)
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def relay(client):
    try:
        target = socket.create_connection(("127.0.0.1", TARGET))
    except OSError:
        client.close()
        return
    for s in (client, target):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pairs.append([client, target])
    threading.Thread(target=pump, args=(client, target), daemon=True).start()
    threading.Thread(target=pump, args=(target, client), daemon=True).start()


def accept_loop(lsock):
    while True:
        try:
            client, _ = lsock.accept()
        except OSError:
            return  # the listener was closed (refuse)
        with lock:
            if state == "up":
                relay(client)
            else:
                held.append(client)


def open_listener():
    global listener
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", LISTEN))
    listener.listen(16)
    threading.Thread(target=accept_loop, args=(listener,), daemon=True).start()


def cut(refuse):
    global state
    with lock:
        state = "refuse" if refuse else "hold"
        if refuse:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept thread
            except OSError:
                pass
            listener.close()
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        pairs.clear()
        say("cut %.6f" % time.monotonic())


def restore():
    global state
    with lock:
        if state == "refuse":
            open_listener()
        state = "up"
        t = time.monotonic()
        for client in held:
            relay(client)
        held.clear()
        say("restore %.6f" % t)


signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGTERM,
                                          signal.SIGINT})
open_listener()
say("ready")
while True:
    sig = signal.sigwait({signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGTERM, signal.SIGINT})
    if sig == signal.SIGUSR1:
        cut(False)
    elif sig == signal.SIGHUP:
        cut(True)
    elif sig == signal.SIGUSR2:
        restore()
    else:
        break
