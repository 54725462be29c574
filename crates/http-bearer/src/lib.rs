//! http-bearer: whether a request carries `Authorization: Bearer <token>`, for both
//! sandbox-runner (`POST /run`) and sandbox-mcp (`/mcp`), so that both read the header
//! the same way: the scheme in any case (RFC 9110 makes it case-insensitive), the token
//! with surrounding blanks trimmed, compared in constant time (the time taken does not
//! tell where the first difference is).
//!
//! It is not for the answer to a refused request: each service says 401 in its own words.

use http::header::AUTHORIZATION;
use http::HeaderMap;
use subtle::ConstantTimeEq;

/// What a request's `Authorization` header says about the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bearer {
    /// The header carries the token.
    Valid,
    /// The header carries a bearer token, but not this one.
    Wrong,
    /// No `Authorization: Bearer ...` header at all (absent, or another scheme).
    Missing,
}

/// Checks the request's headers against `token`.
pub fn check(headers: &HeaderMap, token: &str) -> Bearer {
    let Some(presented) = headers
        .get(AUTHORIZATION)
        .and_then(|v| presented(v.as_bytes()))
    else {
        return Bearer::Missing;
    };
    if bool::from(presented.ct_eq(token.as_bytes())) {
        Bearer::Valid
    } else {
        Bearer::Wrong
    }
}

/// The bearer token a request presents (read as [`check`] reads it), if any: for a service
/// that keys something to the credential, never for deciding whether it is valid.
pub fn presented_token(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| presented(v.as_bytes()))
}

/// The token of a `Bearer` header value, trimmed.
fn presented(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer ";
    let scheme = value.get(..SCHEME.len())?;
    scheme
        .eq_ignore_ascii_case(SCHEME)
        .then(|| value[SCHEME.len()..].trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn the_presented_token_is_read_as_the_check_reads_it() {
        assert_eq!(presented_token(&headers("BEARER  abc ")), Some(&b"abc"[..]));
        assert_eq!(presented_token(&headers("Basic abc")), None);
        assert_eq!(presented_token(&HeaderMap::new()), None);
    }

    #[test]
    fn only_the_exact_token_passes_whatever_the_scheme_case() {
        let token = "0123456789abcdef";
        for ok in [
            "Bearer 0123456789abcdef",
            "bearer 0123456789abcdef",
            "BEARER  0123456789abcdef ",
        ] {
            assert_eq!(check(&headers(ok), token), Bearer::Valid, "{ok:?}");
        }
        for wrong in [
            "Bearer 0123456789abcdeF",
            "Bearer 0123456789abcde",
            "Bearer 0123456789abcdef0",
            "Bearer ",
        ] {
            assert_eq!(check(&headers(wrong), token), Bearer::Wrong, "{wrong:?}");
        }
        for missing in ["Basic 0123456789abcdef", "Bearer", ""] {
            assert_eq!(
                check(&headers(missing), token),
                Bearer::Missing,
                "{missing:?}"
            );
        }
        assert_eq!(check(&HeaderMap::new(), token), Bearer::Missing);
    }
}
