//! `bare-relay LISTEN UPSTREAM`: a client connection's requests go to one keep-alive upstream
//! connection of its own, and what the upstream answers goes back as it came, read by read
//! (chunked framing included, not parsed). No routing, no metrics, no timeouts, no checks
//! beyond finding where a request and an answer end: what is left of a proxy's work a
//! token when everything lingo adds is taken away, on one current-thread tokio runtime as
//! each of lingo's workers is. Trusts its peers (scripts/callgrind.sh's mock and client).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const END: &[u8] = b"\r\n\r\n";
const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

fn content_length(head: &[u8]) -> usize {
    std::str::from_utf8(head)
        .unwrap_or("")
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

fn chunked(head: &[u8]) -> bool {
    head.windows(7).any(|w| w.eq_ignore_ascii_case(b"chunked"))
}

/// Read from `c` into `buf` until it holds a whole request (head and content-length body);
/// its length, or `None` at the end of the connection.
async fn request(c: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    loop {
        if let Some(h) = memchr::memmem::find(buf, END) {
            let total = h + END.len() + content_length(&buf[..h]);
            if buf.len() >= total {
                return Ok(Some(total));
            }
        }
        if c.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// Relay the upstream's answer to one request, read by read, until it has ended.
async fn answer(u: &mut TcpStream, c: &mut TcpStream, up: &mut Vec<u8>) -> std::io::Result<bool> {
    up.clear();
    // The head, and with it whatever body came in the same reads.
    let (h, left) = loop {
        if u.read_buf(up).await? == 0 {
            return Ok(false);
        }
        if let Some(h) = memchr::memmem::find(up, END) {
            let head = &up[..h];
            let left = match chunked(head) {
                true => None,
                false => Some(content_length(head)),
            };
            break (h, left);
        }
    };
    c.write_all(up).await?;
    let body = up.len() - h - END.len();
    match left {
        Some(len) => {
            let mut have = body;
            while have < len {
                up.clear();
                let n = u.read_buf(up).await?;
                if n == 0 {
                    return Ok(false);
                }
                c.write_all(up).await?;
                have += n;
            }
        }
        None => {
            while !up.ends_with(LAST_CHUNK) {
                up.clear();
                if u.read_buf(up).await? == 0 {
                    return Ok(false);
                }
                c.write_all(up).await?;
            }
        }
    }
    Ok(true)
}

async fn serve(mut c: TcpStream, upstream: String) -> std::io::Result<()> {
    let mut u = TcpStream::connect(&upstream).await?;
    c.set_nodelay(true)?;
    u.set_nodelay(true)?;
    let (mut buf, mut up) = (Vec::with_capacity(16 << 10), Vec::with_capacity(16 << 10));
    while let Some(total) = request(&mut c, &mut buf).await? {
        u.write_all(&buf[..total]).await?;
        buf.drain(..total);
        if !answer(&mut u, &mut c, &mut up).await? {
            break;
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: bare-relay LISTEN UPSTREAM (host:port each)");
        return std::process::ExitCode::from(2);
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let l = TcpListener::bind(&listen)
            .await
            .expect("the listen address");
        loop {
            let Ok((c, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(serve(c, upstream.clone()));
        }
    });
    std::process::ExitCode::SUCCESS
}
