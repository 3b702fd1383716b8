//! One HTTP/1.1 request over a fresh TCP connection, written byte for byte as given:
//! what a test needs to send a path no HTTP client would leave alone. `reqwest` (through
//! `url`) resolves `.` and `..` segments, `%2e%2e` included, before a byte is sent, so a
//! test that asks whether two nodes judge `/v1/jobs/b/../a/x` the same way must write
//! the request line itself. Imports tokio only.
//!
//! The answer is read until the node closes the connection (`Connection: close`), so
//! both a `Content-Length` and a chunked body are read whole; every step is bounded by
//! one timeout.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest answer read (a snapshot download of a small test cluster fits easily).
pub const RAW_ANSWER_BYTES_MAX: usize = 64 << 20;

/// A request as it goes on the wire: `target` is the request line's path and query,
/// unchanged.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawRequest {
    pub fn new(method: &str, target: &str) -> RawRequest {
        RawRequest {
            method: method.to_owned(),
            target: target.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> RawRequest {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// `Authorization: Bearer <token>`.
    pub fn bearer(self, token: &str) -> RawRequest {
        self.header("authorization", &format!("Bearer {token}"))
    }

    /// A JSON body, with its `Content-Type`.
    pub fn json(mut self, body: &str) -> RawRequest {
        self.body = body.as_bytes().to_vec();
        self.header("content-type", "application/json")
    }

    /// The bytes sent to `addr`: `Host`, `Content-Length` (for a body or a POST) and
    /// `Connection: close` are added.
    pub fn to_bytes(&self, addr: SocketAddr) -> Vec<u8> {
        let mut head = format!(
            "{} {} HTTP/1.1\r\nhost: {addr}\r\n",
            self.method, self.target
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" {
            head.push_str(&format!("content-length: {}\r\n", self.body.len()));
        }
        head.push_str("connection: close\r\n\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// What came back.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// Names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Why a raw request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
    #[error("malformed answer: {0}")]
    Malformed(String),
}

/// Sends `req` to `addr` on a new connection and reads the answer, all within `bound`.
pub async fn send_raw(
    addr: SocketAddr,
    req: &RawRequest,
    bound: Duration,
) -> Result<RawResponse, RawError> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(&req.to_bytes(addr)).await?;
        let mut bytes = Vec::new();
        let mut reader = (&mut stream).take(RAW_ANSWER_BYTES_MAX as u64);
        reader.read_to_end(&mut bytes).await?;
        Ok::<_, RawError>(bytes)
    };
    let bytes = tokio::time::timeout(bound, exchange)
        .await
        .map_err(|_| RawError::Timeout(bound))??;
    parse_response(&bytes)
}

/// Parses a whole HTTP/1.1 answer (status line, headers, a `Content-Length`, chunked or
/// read-to-close body).
pub fn parse_response(bytes: &[u8]) -> Result<RawResponse, RawError> {
    let bad = |what: &str| RawError::Malformed(what.to_owned());
    let end = find(bytes, b"\r\n\r\n").ok_or_else(|| bad("no end of head"))?;
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| bad("head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(status_line))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut resp = RawResponse {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &bytes[end + 4..];
    resp.body = if resp
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else if let Some(len) = resp.header("content-length").and_then(|l| l.parse().ok()) {
        rest.get(..len)
            .ok_or_else(|| bad("body shorter than its length"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(resp)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A chunked body (RFC 9112 §7.1), trailers ignored.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, RawError> {
    let bad = |what: &str| RawError::Malformed(format!("chunked body: {what}"));
    let mut body = Vec::new();
    loop {
        let line_end = find(rest, b"\r\n").ok_or_else(|| bad("no chunk size"))?;
        let line = std::str::from_utf8(&rest[..line_end]).map_err(|_| bad("size"))?;
        let size_hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad(line))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or_else(|| bad("short chunk"))?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or_else(|| bad("no chunk end"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_line_is_sent_unnormalized() {
        let addr: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        let req = RawRequest::new("POST", "/v1/jobs/b/%2e%2e/a/x/complete")
            .bearer("t")
            .json("{}");
        let text = String::from_utf8(req.to_bytes(addr)).unwrap();
        assert!(
            text.starts_with("POST /v1/jobs/b/%2e%2e/a/x/complete HTTP/1.1\r\n"),
            "{text}"
        );
        assert!(text.contains("authorization: Bearer t\r\n"), "{text}");
        assert!(text.contains("content-length: 2\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n{}"), "{text}");
    }

    #[test]
    fn answers_with_a_length_or_in_chunks_are_read_whole() {
        let sized = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nX-A: b\r\n\r\n{}";
        let r = parse_response(sized).unwrap();
        assert_eq!((r.status, r.text().as_str()), (404, "{}"));
        assert_eq!(r.header("x-a"), Some("b"));
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap().text(), "abcde");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
