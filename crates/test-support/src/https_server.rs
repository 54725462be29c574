//! The HTTPS server of the test hosts that the runner's egress tests and the bench make in
//! network namespaces of their own: a Python program, run as
//! `python3 -c PYTHON_TLS_SERVER FOLDER ADDRESS PORT CERT KEY`, serving FOLDER's files.

/// The program (Python's `http.server`, threaded, its socket wrapped in TLS with the
/// certificate and key given).
pub const PYTHON_TLS_SERVER: &str = r#"
import functools, http.server, ssl, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer((sys.argv[2], int(sys.argv[3])), handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[4], sys.argv[5])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;
