// Starts the real binaries on loopback for the tests; SANDBOX_MCP_BIN and SANDBOX_RUNNER_BIN
// name them.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createInterface } from "node:readline";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const START_TIMEOUT_MS = 60_000;

export function bin(name) {
  const path = process.env[name];
  if (!path) throw new Error(`${name} must name the built binary`);
  return path;
}

function cleanEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(SANDBOX_|MCP_|FEATURE_)/.test(k)) env[k] = v;
  }
  return env;
}

function start(argv, env, prefix) {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { env, stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${argv[0]} did not start: ${stderr}`));
    }, START_TIMEOUT_MS);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${argv[0]} exited with ${code}: ${stderr}`));
    });
    const lines = createInterface({ input: child.stdout });
    lines.once("line", (line) => {
      clearTimeout(timer);
      if (!line.startsWith(prefix)) {
        child.kill("SIGKILL");
        reject(new Error(`unexpected first line ${JSON.stringify(line)}`));
        return;
      }
      resolve({
        child,
        url: line.split(" ").pop(),
        stop: () =>
          new Promise((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            child.removeAllListeners("exit");
            const force = setTimeout(() => child.kill("SIGKILL"), 10_000);
            child.once("exit", () => {
              clearTimeout(force);
              done();
            });
            child.kill("SIGTERM");
          }),
      });
    });
  });
}

export async function startRunner() {
  const token = randomBytes(16).toString("hex");
  const argv = [bin("SANDBOX_RUNNER_BIN"), "serve", "--listen", "127.0.0.1:0", "--token", token, "--pool-size", "2"];
  const proc = await start(argv, cleanEnv(), "sandbox-runner listening on ");
  return { ...proc, token };
}

export async function startMcp(runner, extraEnv = {}) {
  const token = randomBytes(16).toString("hex");
  const env = { ...cleanEnv(), MCP_AUTH_TOKEN: token, PORT: "0", BIND: "127.0.0.1", RUST_LOG: "info" };
  if (runner) Object.assign(env, { SANDBOX_RUNNER_URL: runner.url, SANDBOX_RUNNER_TOKEN: runner.token });
  Object.assign(env, extraEnv);
  const proc = await start([bin("SANDBOX_MCP_BIN"), "serve"], env, "sandbox-mcp listening on ");
  return { ...proc, token, base: proc.url.replace(/\/mcp$/, "") };
}

export async function connect(server, token = server.token) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "sandbox-mcp-ts-tests", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

export function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
}
