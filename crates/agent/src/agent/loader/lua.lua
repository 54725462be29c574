local io, os, string, debug, math = io, os, string, debug, math
-- (The first line is code: `lua5.4 -e ARG` takes no ARG that starts with '-'.)
-- Pre-started Lua: `lua5.4 -e LOADER`. Reads a request line on descriptor 3 (reopened
-- through /proc/self/fd: Lua's library opens files by name only):
-- {"path": ..., "session": ..., "run": N, "stream": ...} (other fields are ignored).
-- One-shot (session false): runs the program as `lua5.4 PATH` would (`arg`, errors
-- printed as `lua5.4: MESSAGE` and a traceback without the loader's frames, status 1),
-- then exits as it would; os.exit exits for real.
-- Session: runs each requested program as a chunk of the one global table, as Lua's own
-- REPL does: globals persist from run to run, a chunk's `local`s do not. os.exit and an
-- error end the run, not the interpreter; then the standard streams are flushed and
-- {"exit": CODE, "run": N} written on descriptor 4.
-- What the loader uses is held in locals, taken before any program runs: a program that
-- changes the global library changes nothing here.
local type, tostring, tonumber, getmetatable, rawequal, error, xpcall, loadfile, utf8 =
  type, tostring, tonumber, getmetatable, rawequal, error, xpcall, loadfile, utf8
local stdout, stderr = io.stdout, io.stderr
local real_exit = os.exit
local progname = arg and arg[0] or "lua"

local go = io.open("/proc/self/fd/3", "rb")
local done = io.open("/proc/self/fd/4", "wb")
if not go or not done then
  stderr:write(progname, ": the loader cannot open its descriptors\n")
  real_exit(70)
end

local escapes = { n = "\n", t = "\t", r = "\r", b = "\b", f = "\f" }
local function unescape(s)
  return (s:gsub("\\(u?)(.)(%x?%x?%x?)", function(u, c, rest)
    if u == "u" then
      return utf8.char(tonumber(c .. rest, 16))
    end
    return (escapes[c] or c) .. rest
  end))
end

local function request()
  local line = go:read("l")
  if not line then
    return nil
  end
  return {
    path = unescape(line:match('"path"%s*:%s*"(.-[^\\])"') or ""),
    session = line:match('"session"%s*:%s*true') ~= nil,
    stream = line:match('"stream"%s*:%s*true') ~= nil,
    run = line:match('"run"%s*:%s*(%d+)') or "0",
  }
end

-- The message `lua5.4` prints for an error object, traceback included; the loader's
-- frames (below the program's chunk) become the `[C]: in ?` that ends Lua's own.
local exiting = {}
local function message(e)
  if rawequal(e, exiting) then
    return e
  end
  if type(e) ~= "string" then
    local meta = getmetatable(e)
    if meta and meta.__tostring then
      local text = tostring(e)
      if type(text) == "string" then
        return text
      end
    end
    e = string.format("(error object is a %s value)", type(e))
  end
  local trace = debug.traceback(e, 2)
  local cut, from = nil, 1
  repeat -- the last xpcall's is the loader's
    local at = trace:find("\n\t[C]: in function 'xpcall'", from, true)
    if at then
      cut, from = at, at + 1
    end
  until not at
  if cut then
    trace = trace:sub(1, cut) .. "\t[C]: in ?"
  end
  return trace
end

local function report(text)
  stderr:write(progname, ": ", text, "\n")
  stderr:flush()
end

local function prepare(job)
  arg = { [-1] = progname, [0] = job.path }
  stdout:setvbuf(job.stream and "line" or "full")
  return loadfile(job.path)
end

local first = request()
if not first then
  real_exit(0)
end
if not first.session then
  go:close()
  done:close()
  local chunk, problem = prepare(first)
  if not chunk then
    report(problem)
    real_exit(1, true)
  end
  local ok, e = xpcall(chunk, message)
  if not ok then
    report(e)
    real_exit(1, true)
  end
  real_exit(0, true)
end

local status
-- os.exit in a session ends the run: what it raises only the loader catches.
local function session_exit(code)
  if code == nil or code == true then
    status = 0
  elseif code == false then
    status = 1
  else
    local n = math.tointeger(code)
    if not n then
      error("bad argument #1 to 'exit' (number has no integer representation)", 2)
    end
    status = n & 0xFF
  end
  error(exiting, 0)
end

local job = first
while job do
  status = 0
  os.exit = session_exit
  local chunk, problem = prepare(job)
  if not chunk then
    report(problem)
    status = 1
  else
    local ok, e = xpcall(chunk, message)
    if not ok and not rawequal(e, exiting) then
      report(e)
      status = 1
    end
  end
  os.exit = real_exit
  stdout:flush()
  stderr:flush()
  done:write('{"exit":', status, ',"run":', job.run, "}\n")
  done:flush()
  job = request()
end
real_exit(0, true)
