// A loopback proxy that adds `Authorization: Bearer $MCP_AUTH_TOKEN` to every request, since
// the conformance suite cannot send auth headers. Everything else (Host, Origin, bodies, SSE
// streams) passes through unchanged. Usage: node auth-proxy.mjs http://127.0.0.1:PORT
import http from "node:http";

const target = new URL(process.argv[2]);
const token = process.env.MCP_AUTH_TOKEN;
if (!token) throw new Error("MCP_AUTH_TOKEN must be set");

const server = http.createServer((req, res) => {
  const upstream = http.request(
    {
      host: target.hostname,
      port: target.port,
      method: req.method,
      path: req.url,
      headers: { ...req.headers, authorization: `Bearer ${token}` },
    },
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on("error", (err) => {
    res.writeHead(502, { "content-type": "text/plain" });
    res.end(`proxy: ${err.message}`);
  });
  res.on("close", () => upstream.destroy());
  req.pipe(upstream);
});

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  console.log(`auth-proxy listening on http://127.0.0.1:${port}`);
});
