//! The command-line flags of the [`Limits`](crate::Limits), written once for both
//! services: [`limit_args!`](crate::limit_args) defines a clap `Args` struct whose four
//! flags are the same in every service (`--header-timeout-ms`, `--max-header-bytes`,
//! `--max-connections`, `--body-timeout-ms`) and whose environment variables carry the
//! service's prefix (`RUNNER_HEADER_TIMEOUT_MS`, `MCP_HEADER_TIMEOUT_MS`, ...).

/// Defines `$name`, a clap `Args` struct for [`Limits`](crate::Limits) whose variables are
/// named `$prefix` + `_HEADER_TIMEOUT_MS`, `_MAX_HEADER_BYTES`, `_MAX_CONNECTIONS` and
/// `_BODY_TIMEOUT_MS`, with a `Default` (the defaults of `Limits`) and `to_limits()`,
/// which validates them.
#[macro_export]
macro_rules! limit_args {
    ($(#[$meta:meta])* $vis:vis struct $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, clap::Args)]
        $vis struct $name {
            /// Time a client has to send a request's headers (and that a keep-alive
            /// connection may stay idle), in milliseconds; slower connections are closed.
            #[arg(long, env = concat!($prefix, "_HEADER_TIMEOUT_MS"),
                  default_value_t = $crate::DEFAULT_HEADER_READ_TIMEOUT.as_millis() as u64)]
            pub header_timeout_ms: u64,
            /// Largest request head (request line and headers) in bytes; more gets 431.
            #[arg(long, env = concat!($prefix, "_MAX_HEADER_BYTES"),
                  default_value_t = $crate::DEFAULT_MAX_HEADER_BYTES)]
            pub max_header_bytes: usize,
            /// Connections served at once; more get 503.
            #[arg(long, env = concat!($prefix, "_MAX_CONNECTIONS"),
                  default_value_t = $crate::DEFAULT_MAX_CONNECTIONS)]
            pub max_connections: usize,
            /// Time a client has to send a whole request body, in milliseconds; slower
            /// gets 408.
            #[arg(long, env = concat!($prefix, "_BODY_TIMEOUT_MS"),
                  default_value_t = $crate::DEFAULT_BODY_READ_TIMEOUT.as_millis() as u64)]
            pub body_timeout_ms: u64,
        }

        impl Default for $name {
            /// The defaults of `Limits`.
            fn default() -> Self {
                let limits = $crate::Limits::default();
                $name {
                    header_timeout_ms: limits.header_read_timeout.as_millis() as u64,
                    max_header_bytes: limits.max_header_bytes,
                    max_connections: limits.max_connections,
                    body_timeout_ms: limits.body_read_timeout.as_millis() as u64,
                }
            }
        }

        impl $name {
            /// The limits these flags give, checked.
            pub fn to_limits(&self) -> Result<$crate::Limits, $crate::LimitError> {
                $crate::Limits {
                    header_read_timeout: std::time::Duration::from_millis(self.header_timeout_ms),
                    max_header_bytes: self.max_header_bytes,
                    max_connections: self.max_connections,
                    body_read_timeout: std::time::Duration::from_millis(self.body_timeout_ms),
                }
                .validate()
            }
        }
    };
}
