//! lingo's own HTTP/1.1 client for plain `http://` upstreams.
//!
//! Why not hyper's pooled client: it runs each connection in a task of its own and hands the
//! body over one HTTP chunk per wake-up of that task, so a stream's events that arrived in one
//! socket read still leave lingo one write each (a profile put 40% of streaming time in those
//! writes). Here the request's own task reads the socket: every event a read brings is
//! decoded at once and leaves in one write, and no task, channel or wake-up sits between the
//! upstream and the client. `https://` upstreams keep hyper's client (TLS, HTTP/2).

mod body;
pub(crate) mod framing;
pub(crate) mod head;
mod pool;

use std::future::poll_fn;
use std::io;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::{HeaderMap, StatusCode};
use tokio::io::AsyncWriteExt;

pub use body::Body;
pub(crate) use body::{poll_fill, poll_piece, Failure};
pub use head::encode as encode_head;
pub(crate) use head::{has_token, parse_length, trim};
pub use pool::Pool;

use pool::Conn;

/// Bodies up to this size are copied behind the head, so the request leaves in one write.
pub const INLINE_BODY: usize = 16 << 10;

/// Why a request got no response head.
#[derive(Debug)]
pub enum Error {
    /// No connection could be made (`TimedOut` when `timeouts.connect` fired).
    Connect(io::Error),
    /// The connection closed or broke before a whole response head arrived.
    Closed {
        /// The request could not be written, or the server closed cleanly before any byte of
        /// a response: on a reused connection, a keep-alive the server had already closed,
        /// so the request is safe to send again.
        early: bool,
        io: Option<io::Error>,
    },
    /// The response head is not one lingo can read.
    Protocol(String),
}

/// The response head and its still-unread body.
pub struct Response {
    pub status: StatusCode,
    pub content_type: Option<http::HeaderValue>,
    /// Only the headers lingo reads (`head::READ`).
    pub headers: HeaderMap,
    pub body: Body,
}

impl Pool {
    /// Send one request (`wire`: head, with the body already behind it when `body` is empty)
    /// and read the response head. A pooled connection the server closed while idle fails
    /// before any response byte; the request then goes once more on a fresh connection.
    pub async fn request(
        &self,
        wire: &[u8],
        body: &[u8],
        head_request: bool,
    ) -> Result<Response, Error> {
        if let Some(conn) = self.checkout() {
            match exchange(conn, wire, body, head_request).await {
                Err(Error::Closed { early: true, io }) => {
                    tracing::debug!(error = ?io, "pooled upstream connection was closed; reconnecting");
                }
                done => return done,
            }
        }
        let conn = self.connect().await.map_err(Error::Connect)?;
        exchange(conn, wire, body, head_request).await
    }
}

async fn exchange(
    mut conn: Conn,
    wire: &[u8],
    body: &[u8],
    head_request: bool,
) -> Result<Response, Error> {
    let sent = async {
        conn.io.write_all(wire).await?;
        if !body.is_empty() {
            conn.io.write_all(body).await?;
        }
        io::Result::Ok(())
    };
    sent.await.map_err(|e| Error::Closed {
        early: true,
        io: Some(e),
    })?;
    let head = read_head(&mut conn, head_request).await?;
    Ok(Response {
        status: head.status,
        content_type: head.content_type,
        headers: head.headers,
        body: Body::new(conn, head.framing, head.reusable),
    })
}

/// Read until a final (non-1xx) response head is complete; the bytes after it stay in the
/// buffer for the body.
async fn read_head(conn: &mut Conn, head_request: bool) -> Result<head::Head, Error> {
    let mut got = 0usize;
    loop {
        if !conn.buf.is_empty() {
            match head::parse(&conn.buf, head_request).map_err(Error::Protocol)? {
                // Advanced past, not split off: a split would make the buffer shared (an
                // allocation) and keep the head's bytes alive as long as the body's.
                Some(h) if h.status.is_informational() => {
                    conn.buf.advance(h.len);
                    continue;
                }
                Some(h) => {
                    conn.buf.advance(h.len);
                    return Ok(h);
                }
                None => {}
            }
        }
        // Into the thread's landing buffer while the buffer is empty (`poll_fill`): a head
        // and its body cost no allocation of their own.
        match poll_fn(|cx| poll_fill(&conn.io, &mut conn.buf, cx)).await {
            Ok(0) => {
                return Err(Error::Closed {
                    early: got == 0,
                    io: None,
                })
            }
            Ok(n) => got += n,
            // A reset after the request went out may mean the server took it and failed:
            // not sent again (hyper's client does not either).
            Err(e) => {
                return Err(Error::Closed {
                    early: false,
                    io: Some(e),
                })
            }
        }
    }
}

/// Room for the next read: 8 KiB, the size of most streams' events many times over.
pub(crate) fn reserve(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(8 << 10);
    }
}

/// How long a pool keeps an idle connection, and how long a connect may take.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub idle_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_idle: usize,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::body::BodyError;
    use super::*;

    fn pool(port: u16) -> Pool {
        let settings = Settings {
            idle_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_idle: 4,
        };
        Pool::new("127.0.0.1", port, settings)
    }

    /// A server that answers each request on a connection with `answers[i]` in turn, then
    /// closes it; returns how many connections it accepted.
    async fn server(answers: Vec<&'static [u8]>) -> (u16, tokio::task::JoinHandle<usize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let mut conns = 0;
            let mut answers = answers.into_iter().peekable();
            while answers.peek().is_some() {
                let (mut s, _) = l.accept().await.unwrap();
                conns += 1;
                let mut buf = vec![0u8; 4096];
                for a in answers.by_ref() {
                    let mut got = 0;
                    while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf[got..]).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got += n,
                        }
                    }
                    s.write_all(a).await.unwrap();
                    if a.starts_with(b"HTTP/1.1 200 OK\r\nconnection: close") {
                        break;
                    }
                }
            }
            conns
        });
        (port, task)
    }

    async fn get(p: &Pool) -> (StatusCode, Vec<u8>) {
        let mut wire = Vec::new();
        encode_head(&mut wire, &http::Method::GET, ("", "/x"), "h", &[], 0);
        let r = p.request(&wire, &[], false).await.unwrap();
        let body = r.body.collect().await.unwrap().to_bytes();
        (r.status, body.to_vec())
    }

    /// A GET of `/` whose first body chunk must be `abc`; the response, mid-body.
    async fn first_chunk_is_abc(p: &Pool) -> Response {
        let mut wire = Vec::new();
        encode_head(&mut wire, &http::Method::GET, ("", "/"), "h", &[], 0);
        let mut r = p.request(&wire, &[], false).await.unwrap();
        let first = r.body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"abc");
        r
    }

    const CHUNKED: &[u8] =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    const LENGTH: &[u8] = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok";

    #[tokio::test]
    async fn a_body_read_to_its_end_frees_its_connection_for_the_next_request() {
        let (port, server) = server(vec![CHUNKED, LENGTH]).await;
        let p = pool(port);
        assert_eq!(get(&p).await, (StatusCode::OK, b"abc".to_vec()));
        assert_eq!(p.idle(), 1);
        assert_eq!(get(&p).await, (StatusCode::CREATED, b"ok".to_vec()));
        assert_eq!(server.await.unwrap(), 1, "both requests on one connection");
    }

    #[tokio::test]
    async fn a_body_dropped_early_or_marked_close_is_not_reused() {
        let close: &[u8] = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let (port, accepted) = server(vec![close, LENGTH]).await;
        let p = pool(port);
        assert_eq!(get(&p).await.0, StatusCode::OK);
        assert_eq!(p.idle(), 0);
        assert_eq!(get(&p).await.0, StatusCode::CREATED);
        assert_eq!(accepted.await.unwrap(), 2);

        let (port, _server) =
            server(vec![b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nabc"]).await;
        let p = pool(port);
        let r = first_chunk_is_abc(&p).await;
        drop(r);
        assert_eq!(
            p.idle(),
            0,
            "a body not read to its end closes its connection"
        );
    }

    #[tokio::test]
    async fn an_idle_connection_the_server_closed_is_replaced() {
        // The server answers one request per connection and closes, so the pooled one is
        // dead by the second request: that request goes on a new connection.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            for _ in 0..2 {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                s.write_all(LENGTH).await.unwrap();
            }
        });
        let p = pool(port);
        assert_eq!(get(&p).await.0, StatusCode::CREATED);
        assert_eq!(p.idle(), 1);
        let stale = tokio::time::timeout(Duration::from_secs(5), get(&p)).await;
        assert_eq!(stale.unwrap().0, StatusCode::CREATED);
        server.await.unwrap();
    }

    /// A server that answers the first request with `first`, then, when told, `then`.
    async fn two_writes(
        first: &'static [u8],
        then: &'static [u8],
    ) -> (u16, tokio::sync::oneshot::Sender<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (go, next) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            s.write_all(first).await.unwrap();
            if next.await.is_ok() {
                s.write_all(then).await.unwrap();
            }
        });
        (port, go)
    }

    const FIRST_CHUNK: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n";

    #[tokio::test]
    async fn a_stream_waiting_for_its_next_chunk_holds_no_read_buffer() {
        // One chunk, then the server holds the stream open.
        let (port, hold) = two_writes(FIRST_CHUNK, b"").await;
        let p = pool(port);
        let mut r = first_chunk_is_abc(&p).await;
        // The server says no more for now: the wait lets the buffer go.
        assert!(r.body.frame().now_or_never().is_none());
        assert_eq!(r.body.buffer_capacity(), Some(0));
        drop(hold);
    }

    #[tokio::test]
    async fn reads_are_split_off_one_landing_buffer_not_given_their_own() {
        let (port, go) = two_writes(FIRST_CHUNK, b"3\r\ndef\r\n0\r\n\r\n").await;
        let p = pool(port);
        let mut wire = Vec::new();
        encode_head(&mut wire, &http::Method::GET, ("", "/"), "h", &[], 0);
        let mut r = p.request(&wire, &[], false).await.unwrap();
        let abc = r.body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&abc[..], b"abc");
        assert!(r.body.frame().now_or_never().is_none());
        go.send(()).unwrap();
        let def = r.body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&def[..], b"def");
        // The first read ended with `abc\r\n`; the second, `3\r\ndef...`, landed right
        // behind it in the same buffer.
        let (abc_at, def_at) = (abc.as_ptr() as usize, def.as_ptr() as usize);
        assert_eq!(def_at, abc_at + 3 + 2 + 3);
    }

    #[tokio::test]
    async fn a_body_is_dry_once_a_read_that_drained_the_socket_is_used_up() {
        // Two chunks in one write, so in one read: after the first, the second is still
        // buffered; after the second only its CRLF is, and the read took all there was.
        let (port, go) = two_writes(FIRST_CHUNK, b"3\r\ndef\r\n3\r\nghi\r\n").await;
        let p = pool(port);
        let mut r = first_chunk_is_abc(&p).await;
        let body = &mut r.body;
        go.send(()).unwrap();
        let def = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&def[..], b"def");
        assert!(!body.dry(), "the next chunk is buffered");
        let ghi = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&ghi[..], b"ghi");
        assert!(
            body.dry(),
            "only the chunk's CRLF is left, and the socket was drained"
        );
    }

    #[tokio::test]
    async fn a_connection_that_closes_mid_body_is_an_error() {
        let (port, _server) = server(vec![
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n3\r\nab",
        ])
        .await;
        let p = pool(port);
        let mut wire = Vec::new();
        encode_head(&mut wire, &http::Method::GET, ("", "/"), "h", &[], 0);
        let r = p.request(&wire, &[], false).await.unwrap();
        let Err(err) = r.body.collect().await else {
            panic!("a body cut short must fail")
        };
        assert!(matches!(err, BodyError::Closed), "{err}");
    }
}
