"""Times run_tool round trips on the daemon's own socket, with no `bx mcp` between.

Usage: python host/bench/wire_calls.py STATE WORKSPACE SESSION TOOL PATH N
Speaks the wire protocol (docs/wire.md: a 4-byte big-endian length, then the envelope)
to the running daemon of STATE, as `bx mcp` does for each tools/call, and prints the
median of N calls of TOOL with {"path": PATH} in SESSION. Against
host/bench/mcp_calls.py on the same daemon it gives what the hop through `bx mcp`
costs a call (docs/mcp.md#against-a-bare-host).
"""

import json
import socket
import struct
import sys
import time

S, W, session, tool, path, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
s = socket.socket(socket.AF_UNIX)
s.settimeout(60)  # a daemon that stops answering ends the run, not hangs it
s.connect(S + "/bx.sock")
token = open(S + "/bx.sock.token").read().strip()
buf = b""


def send(i, msg):
    body = json.dumps({"v": 1, "id": i, "msg": msg}).encode()
    s.sendall(struct.pack(">I", len(body)) + body)


def recv():
    global buf
    while True:
        if len(buf) >= 4:
            size = struct.unpack(">I", buf[:4])[0]
            if len(buf) >= 4 + size:
                frame, buf = buf[4 : 4 + size], buf[4 + size :]
                # A text result's bytes follow the envelope's JSON, `attached` of them.
                envelope, _ = json.JSONDecoder().raw_decode(frame.decode())
                if "attached" in envelope:
                    envelope["msg"]["text"] = frame[len(frame) - envelope["attached"] :].decode()
                return envelope
        more = s.recv(1 << 16)
        assert more, "the daemon closed the connection"
        buf += more


send(0, {"type": "hello", "token": token})
overlay = {"read": [], "write": [], "hosts": [], "deny": []}
ts = []
for i in range(1, n + 1):
    t = time.perf_counter()
    send(i, {"type": "run_tool", "session": session, "tool": tool, "args": json.dumps({"path": path}),
             "overlay": overlay, "workspace": W, "quiet": True})
    while True:
        m = recv()
        if m.get("id") == i and m["msg"]["type"] in ("tool_output", "error"):
            break
    ts.append(time.perf_counter() - t)
    assert m["msg"]["type"] == "tool_output" and m["msg"]["outcome"] in ("json", "text"), str(m)[:300]
ts.sort()
print(tool, "median %.3f ms" % (ts[len(ts) // 2] * 1000))
