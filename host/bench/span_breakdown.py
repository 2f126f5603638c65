"""Where a small call's time goes, from bx's own spans (docs/telemetry.md).

Usage: .venv/bin/python host/bench/span_breakdown.py BX STATE WORKSPACE TOOL PATH N
Writes [telemetry] into STATE/config.toml pointing at an OTLP/HTTP receiver here
(decoded with opentelemetry-proto, which make setup installs), starts `bx serve`, makes N
calls through `bx mcp`, and prints the client's round trip and each span's median
(the first 30 left out). docs/mcp.md quotes it.
"""
import http.server, threading, json, subprocess, sys, time, statistics, os
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
spans = []
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('content-length', 0)))
        if self.path == '/v1/traces':
            req = trace_service_pb2.ExportTraceServiceRequest(); req.ParseFromString(body)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        spans.append((s.name, (s.end_time_unix_nano - s.start_time_unix_nano) / 1e6))
        self.send_response(200); self.send_header('content-length', '0'); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
port = srv.server_address[1]
bx, S, W, tool, path, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
open(os.path.join(S, 'config.toml'), 'w').write(f'[telemetry]\nendpoint = "http://127.0.0.1:{port}"\n')
d = subprocess.Popen([bx, '--state-dir', S, 'serve'], stderr=subprocess.DEVNULL)
time.sleep(1.5)
p = subprocess.Popen([bx, '--state-dir', S, 'mcp', '--workspace', W], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
def send(o): p.stdin.write(json.dumps(o) + '\n'); p.stdin.flush()
send({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}); p.stdout.readline()
send({"jsonrpc":"2.0","method":"notifications/initialized"})
rt = []
for i in range(n):
    t = time.perf_counter()
    send({"jsonrpc":"2.0","id":i+1,"method":"tools/call","params":{"name":tool,"arguments":{"path":path}}})
    p.stdout.readline(); rt.append((time.perf_counter() - t) * 1000)
p.stdin.close(); p.wait(); d.terminate(); d.wait(); time.sleep(0.5)
med = lambda xs: statistics.median(xs) if xs else float('nan')
print(f"client round trip (python, stdio): {med(rt[30:]):.3f} ms")
by = {}
for name, ms in spans: by.setdefault(name, []).append(ms)
for name, xs in sorted(by.items()):
    print(f"{name}: n={len(xs)} median {med(xs[30:]):.3f} ms")
