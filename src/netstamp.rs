//! When bytes really arrived and left: a TCP stream that records the kernel's receive
//! timestamp of the last bytes read (`SO_TIMESTAMPNS`, taken as the packet entered the
//! stack) and the moment of the first write after it was armed.
//!
//! Why: a task that reads a socket late (its runtime busy with other streams) would stamp
//! every byte with its own lateness. The load driver times tokens by the kernel's stamp, so
//! its TTFT is the server's, not the server's plus the driver's queueing; the mock dates a
//! request from when its bytes arrived, not from when its handler ran. Where the kernel
//! gives no stamp, the read's own time stands in.

use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// Default size of the buffer each read goes through: `recvmsg` needs initialised memory,
/// and zeroing the caller's (hyper's, up to hundreds of KiB) for every read of a 200-byte
/// event costs more than copying the bytes once from a buffer zeroed once per stream.
pub const SCRATCH: usize = 16 * 1024;
/// A stamp older than this is not believed (the wall clock stepped): the read's time is used.
const MAX_AGE: Duration = Duration::from_secs(10);
/// Room for one `SCM_TIMESTAMPNS` control message (a 16-byte header and a timespec).
const CMSG_ROOM: usize = 64;

/// The shared instants of one connection, as nanoseconds since a process-wide origin (0: none).
#[derive(Debug, Default)]
pub struct Stamps {
    rx: AtomicU64,
    tx: AtomicU64,
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

fn encode(at: Instant) -> u64 {
    let n = at.saturating_duration_since(origin()).as_nanos();
    u64::try_from(n).unwrap_or(u64::MAX - 1) + 1
}

fn decode(n: u64) -> Option<Instant> {
    (n > 0).then(|| origin() + Duration::from_nanos(n - 1))
}

impl Stamps {
    /// When the bytes of the last read reached the socket (never later than the read).
    pub fn received(&self) -> Option<Instant> {
        decode(self.rx.load(Ordering::Acquire))
    }

    /// Forget the last write time: the next write is recorded as `sent`.
    pub fn arm_send(&self) {
        self.tx.store(0, Ordering::Release);
    }

    /// When the first write since `arm_send` began.
    pub fn sent(&self) -> Option<Instant> {
        decode(self.tx.load(Ordering::Acquire))
    }

    fn wrote(&self) {
        if self.tx.load(Ordering::Relaxed) == 0 {
            self.tx.store(encode(Instant::now()), Ordering::Release);
        }
    }

    fn read(&self, at: Instant) {
        self.rx.store(encode(at), Ordering::Release);
    }
}

/// A TCP stream whose reads and writes update its [`Stamps`].
pub struct StampedTcp {
    tcp: TcpStream,
    stamps: Arc<Stamps>,
    /// Whether the kernel was asked for receive timestamps (else reads are plain).
    kernel: bool,
    /// Where stamped reads land before they are copied out (empty until the first read).
    scratch: Vec<u8>,
    /// Its size once allocated: the most one read takes.
    scratch_len: usize,
}

impl StampedTcp {
    /// Wrap `tcp`, asking the kernel for receive timestamps.
    pub fn new(tcp: TcpStream) -> StampedTcp {
        StampedTcp::with_reads_of(tcp, SCRATCH)
    }

    /// `new`, reading at most `bytes` at a time (a server whose requests are small keeps
    /// less memory per connection).
    pub fn with_reads_of(tcp: TcpStream, bytes: usize) -> StampedTcp {
        let kernel = setsockopt(&tcp, sockopt::ReceiveTimestampns, &true).is_ok();
        StampedTcp {
            tcp,
            stamps: Arc::new(Stamps::default()),
            kernel,
            scratch: Vec::new(),
            scratch_len: bytes.max(1),
        }
    }

    pub fn stamps(&self) -> Arc<Stamps> {
        self.stamps.clone()
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

/// The kernel's stamp (wall clock) as an instant of the monotonic clock, from the age of the
/// stamp now; `None` when it is implausible.
fn to_instant(sec: i64, nsec: i64) -> Option<Instant> {
    let stamp = UNIX_EPOCH + Duration::new(u64::try_from(sec).ok()?, u32::try_from(nsec).ok()?);
    let (wall, now) = (SystemTime::now(), Instant::now());
    let age = wall.duration_since(stamp).unwrap_or(Duration::ZERO);
    (age <= MAX_AGE).then(|| now.checked_sub(age)).flatten()
}

/// One `recvmsg` into `dst`: bytes read, and the kernel's stamp of the last of them.
fn recv_stamped(fd: i32, dst: &mut [u8]) -> io::Result<(usize, Option<Instant>)> {
    let mut cmsg = [0u8; CMSG_ROOM];
    let mut iov = [IoSliceMut::new(dst)];
    let msg =
        recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), MsgFlags::empty()).map_err(io::Error::from)?;
    let stamp = msg.cmsgs().ok().and_then(|mut c| {
        c.find_map(|m| match m {
            ControlMessageOwned::ScmTimestampns(t) => to_instant(t.tv_sec(), t.tv_nsec()),
            _ => None,
        })
    });
    Ok((msg.bytes, stamp))
}

impl AsyncRead for StampedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.kernel {
            let before = buf.filled().len();
            ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
            if buf.filled().len() > before {
                this.stamps.read(Instant::now());
            }
            return Poll::Ready(Ok(()));
        }
        if this.scratch.is_empty() {
            this.scratch = vec![0; this.scratch_len];
        }
        loop {
            ready!(this.tcp.poll_read_ready(cx))?;
            let room = buf.remaining().min(this.scratch.len());
            let dst = &mut this.scratch[..room];
            let fd = this.tcp.as_raw_fd();
            match this
                .tcp
                .try_io(Interest::READABLE, || recv_stamped(fd, dst))
            {
                Ok((n, stamp)) => {
                    if n > 0 {
                        let now = Instant::now();
                        this.stamps.read(stamp.map_or(now, |s| s.min(now)));
                    }
                    buf.put_slice(&this.scratch[..n]);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for StampedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.stamps.wrote();
        Pin::new(&mut this.tcp).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.stamps.wrote();
        Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_carry_a_stamp_no_later_than_the_read_and_writes_are_dated() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let mut client = StampedTcp::new(client);
        let stamps = client.stamps();
        assert!(stamps.received().is_none());
        let before = Instant::now();
        server.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        client.read_exact(&mut got).await.unwrap();
        let after = Instant::now();
        assert_eq!(&got, b"hello");
        let rx = stamps.received().unwrap();
        // The stamp is the packet's arrival: after the write began, no later than the read.
        assert!(rx <= after);
        assert!(rx + Duration::from_millis(5) >= before, "{:?}", before - rx);

        stamps.arm_send();
        assert!(stamps.sent().is_none());
        client.write_all(b"x").await.unwrap();
        let first = stamps.sent().unwrap();
        client.write_all(b"y").await.unwrap();
        assert_eq!(
            stamps.sent(),
            Some(first),
            "only the first write after arming counts"
        );
    }
}
