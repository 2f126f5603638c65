"""Times tools/call round trips through `bx mcp` from a plain Python client (stdio).

Usage: python host/bench/mcp_calls.py BX STATE WORKSPACE TOOL PATH N [WRAPPER...]
Prints the median of N calls of TOOL with {"path": PATH}; `bx mcp` runs under WRAPPER
when one is given (`perf stat -o FILE`, as host/bench/handoffs.sh does). docs/mcp.md
quotes it for a before-and-after of two builds of bx against one running daemon each.
"""

import json
import subprocess
import sys
import time

bx, S, W, tool, path, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
wrapper = sys.argv[7:]
p = subprocess.Popen(wrapper + [bx, "--state-dir", S, "mcp", "--workspace", W], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
def send(o): p.stdin.write(json.dumps(o)+"\n"); p.stdin.flush()
send({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}); p.stdout.readline()
send({"jsonrpc":"2.0","method":"notifications/initialized"})
ts=[]
for i in range(n):
    t=time.perf_counter()
    send({"jsonrpc":"2.0","id":i+1,"method":"tools/call","params":{"name":tool,"arguments":{"path":path}}})
    line=p.stdout.readline()
    ts.append(time.perf_counter()-t)
    assert '"isError":false' in line, line[:300]
ts.sort(); print(tool, "median %.3f ms" % (ts[len(ts)//2]*1000))
p.stdin.close(); p.wait()
