//! What the property tests over sockets share: their servers' runtime, turns between cases,
//! bytes cut into writes, and reads off a socket.

use std::sync::{Mutex, MutexGuard, PoisonError};

use proptest::sample::Index;
use tokio::io::{AsyncRead, AsyncReadExt};

/// A runtime for servers that outlive each case (proptest runs a case with `block_on`).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Cases that read shared servers' counters before and after take turns, across the tests
/// of one binary too.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `wire` cut at the given points into the pieces to write.
pub fn pieces<'a>(wire: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    if wire.is_empty() {
        return Vec::new();
    }
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(wire.len())).collect();
    at.push(wire.len());
    at.sort_unstable();
    let mut from = 0;
    let mut out = Vec::new();
    for to in at {
        if to > from {
            out.push(&wire[from..to]);
            from = to;
        }
    }
    out
}

/// Read once more off `s` into `buf`; `None` once it is closed or broken.
pub async fn fill<R: AsyncRead + Unpin>(s: &mut R, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 4096];
    match s.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

/// `body` chunked (HTTP/1.1) into `w`, in chunks of `sizes` and the rest in one last chunk.
pub fn chunked(w: &mut Vec<u8>, body: &[u8], sizes: &[usize]) {
    let mut rest = body;
    for &n in sizes {
        let n = n.min(rest.len());
        if n == 0 {
            break;
        }
        w.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        w.extend_from_slice(&rest[..n]);
        w.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    if !rest.is_empty() {
        w.extend_from_slice(format!("{:x}\r\n", rest.len()).as_bytes());
        w.extend_from_slice(rest);
        w.extend_from_slice(b"\r\n");
    }
    w.extend_from_slice(b"0\r\n\r\n");
}

/// Read off `s` until `buf` holds a whole head (to its blank line); where the head ends.
pub async fn head_end<R: AsyncRead + Unpin>(s: &mut R, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i + 4);
        }
        fill(s, buf).await?;
    }
}
