# Pre-started Ruby: `ruby -e LOADER`. Reads a request line on descriptor 3:
# {"path": ..., "session": ..., "run": N, "stream": ...} (other fields are ignored).
# One-shot (session false): runs the program as `ruby PATH` would ($0, __FILE__, ARGV,
# DATA, at_exit handlers, exit codes, uncaught exceptions printed by Ruby itself with
# the loader's frames taken out of their backtrace), then exits as it would.
# Session: runs each requested program in TOPLEVEL_BINDING, so that local variables,
# methods, constants and requires persist from run to run; `exit`/`abort` and an
# uncaught exception end the run, not the interpreter (`exit!` and signals do end it);
# then flushes the standard streams and writes {"exit": CODE, "run": N} on descriptor 4.
# at_exit handlers of a session's programs run when the interpreter ends, not after each
# run. Everything lives in this lambda's scope: the program sees no name of the loader's.
-> {
  go = IO.new(3, "rb")
  go.close_on_exec = true
  done = IO.new(4, "wb")
  done.close_on_exec = true

  field = ->(line, name, pattern) { line[/"#{name}"\s*:\s*#{pattern}/, 1] }
  unescape = lambda do |s|
    s.gsub(/\\(u\h{4}|.)/) do
      c = Regexp.last_match(1)
      c.start_with?("u") && c.size == 5 ? [c[1..].hex].pack("U") : { "n" => "\n", "t" => "\t", "r" => "\r", "b" => "\b", "f" => "\f" }.fetch(c, c)
    end
  end
  request = lambda do
    line = go.gets
    line && {
      path: unescape.(field.(line, "path", '"((?:[^"\\\\]|\\\\.)*)"').to_s),
      session: field.(line, "session", "(true)") == "true",
      stream: field.(line, "stream", "(true)") == "true",
      run: field.(line, "run", '(\d+)').to_s,
    }
  end

  # What the program's file holds after its __END__ line, as `ruby PATH` gives it.
  data = lambda do |path, source|
    Object.send(:remove_const, :DATA) if Object.const_defined?(:DATA, false)
    found = /^__END__\r?(\n|\z)/.match(source)
    return unless found
    file = File.open(path, "rb")
    file.seek(found.end(0))
    Object.const_set(:DATA, file)
  end

  # The loader's frames are dropped from a backtrace: what is left is the program's.
  own = lambda do |e|
    trace = e.backtrace
    at = trace && trace.index { |l| l.start_with?("#{__FILE__}:") }
    e.set_backtrace(trace[0...at]) if at
    at == 0
  end

  prepare = lambda do |job|
    path = job[:path]
    source = File.binread(path)
    $0 = path
    ARGV.clear
    STDOUT.sync = job[:stream]
    data.(path, source)
    [path, source]
  end

  flush = lambda do
    [$stdout, $stderr, STDOUT, STDERR].uniq.each do |io|
      io.flush
    rescue StandardError
      nil
    end
  end

  first = request.()
  exit 0 unless first
  unless first[:session]
    path, source = prepare.(first)
    go.close
    done.close
    begin
      TOPLEVEL_BINDING.eval(source, path, 1)
    rescue SyntaxError => e
      raise unless own.(e)
      # As Ruby reports a program that does not parse: its message, nothing more.
      $stderr.puts(e.message)
      exit 1
    rescue Exception => e
      own.(e)
      raise e
    end
    exit 0
  end

  job = first
  while job
    status = 0
    begin
      path, source = prepare.(job)
      TOPLEVEL_BINDING.eval(source, path, 1)
    rescue SystemExit => e
      status = e.status & 0xFF
    rescue SyntaxError => e
      $stderr.write(own.(e) ? "#{e.message.chomp}\n" : e.full_message(highlight: false, order: :top))
      status = 1
    rescue Exception => e
      own.(e)
      $stderr.write(e.full_message(highlight: false, order: :top))
      status = 1
    end
    flush.()
    done.write("{\"exit\":#{status},\"run\":#{job[:run]}}\n")
    done.flush
    job = request.()
  end
  exit 0
}.call
