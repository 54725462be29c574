// The tools this run may call, by server: `await tools.<server>.<tool>({...arguments})`.
//
// Written by the sandbox's agent for this run from the tools its caller offers. Each
// function sends one call to the agent's socket, on a connection of its own (calls may
// run at once: Promise.all), and resolves to the tool's result (its structured content
// when it has some, else its text); it rejects with a ToolError (an Error) when the call
// fails: the tool's error, or a refusal (a tool not offered, the run's budget of calls
// spent, the run ending). list() lists the servers and their tools.
'use strict';

const net = require('net');

class ToolError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ToolError';
  }
}

const call = (server, tool, args) => new Promise((resolve, reject) => {
  let line;
  try {
    line = JSON.stringify({ server, tool, arguments: args === undefined ? {} : args }) + '\n';
  } catch (e) {
    reject(e);
    return;
  }
  const chunks = [];
  let settled = false;
  const settle = (f, value) => {
    if (!settled) {
      settled = true;
      f(value);
    }
  };
  const conn = net.createConnection(SOCKET, () => conn.end(line));
  conn.on('data', (chunk) => chunks.push(chunk));
  conn.on('error', (e) => settle(reject, new ToolError(`tools: the call could not be made (${e.code || e.message})`)));
  conn.on('close', () => {
    const text = Buffer.concat(chunks).toString();
    if (!text.endsWith('\n')) {
      settle(reject, new ToolError('tools: the call got no answer (the run is ending)'));
      return;
    }
    let answer;
    try {
      answer = JSON.parse(text);
    } catch (e) {
      settle(reject, new ToolError(`tools: the answer is not JSON (${e.message})`));
      return;
    }
    if (answer.error !== undefined && answer.error !== null) settle(reject, new ToolError(answer.error));
    else settle(resolve, answer.result);
  });
});

const tool = (server, name, fn, description) => {
  const f = (args) => call(server, name, args);
  Object.defineProperty(f, 'name', { value: fn });
  f.tool = name;
  f.description = description;
  return f;
};

const servers = [];
const server = (name, functions) => {
  const s = {};
  for (const f of functions) s[f.name] = f;
  servers.push({ name, functions });
  return Object.freeze(s);
};

// The servers and their tools: [{server, tools: [{name, function, description}]}].
const list = () => servers.map(({ name, functions }) => ({
  server: name,
  tools: functions.map((f) => ({ name: f.tool, function: f.name, description: f.description })),
}));

exports.ToolError = ToolError;
exports.list = list;
