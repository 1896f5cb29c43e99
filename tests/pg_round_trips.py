"""Round trips to PostgreSQL, counted on the wire by a loopback proxy.

Used by the tests that pin how many round trips each store call costs and by the whole-turn
benchmark on PostgreSQL.
"""

from __future__ import annotations

import select
import socket
import threading


class RoundTripCounter:
    """A loopback TCP proxy in front of PostgreSQL that counts round trips: a client message
    that follows a server message (or opens the connection) starts one. Used only to count;
    the timings go straight to the server."""

    def __init__(self, url: str) -> None:
        rest = url.split("://", 1)[1]
        userinfo, _, hostpart = rest.rpartition("@")
        hostport, _, self._db = hostpart.partition("/")
        host, _, port = hostport.partition(":")
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"postgresql://{userinfo}@127.0.0.1:{self._listener.getsockname()[1]}/{self._db}"
        self.round_trips = 0
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        server_spoke_last = True
        with client, server:
            while True:
                readable, _, _ = select.select([client, server], [], [])
                for s in readable:
                    data = s.recv(1 << 16)
                    if not data:
                        return
                    if s is client:
                        if server_spoke_last:
                            with self._lock:
                                self.round_trips += 1
                        server_spoke_last = False
                        server.sendall(data)
                    else:
                        server_spoke_last = True
                        client.sendall(data)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
