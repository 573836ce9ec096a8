//! The mock's listener: TCP connections that a `reset` fault can end with an RST rather than a
//! FIN, by setting a zero linger just before the socket closes.
//!
//! Served through a plain `axum::serve(listener, router(state))` the mock still works; `reset`
//! then closes with a FIN, which a client sees as the same "no response" but not as a reset.
//!
//! The connections also keep the kernel's receive stamp of their last read (see `netstamp`),
//! so a request's TTFT can run from when its bytes arrived, not from when its handler ran.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

use crate::netstamp::{StampedTcp, Stamps};

/// Per-connection switch: once armed, the connection resets when hyper drops it. Reaches the
/// handlers as `ConnectInfo<ResetOnDrop>`, with the connection's receive stamps.
#[derive(Debug, Clone, Default)]
pub struct ResetOnDrop(Arc<AtomicBool>, Arc<Stamps>);

impl ResetOnDrop {
    pub(crate) fn arm(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// When the bytes the connection read last reached its socket: a request's arrival, read
    /// as its handler starts.
    pub(crate) fn arrived(&self) -> Option<std::time::Instant> {
        self.1.received()
    }

    /// The connection's stamps: the mock arms them to learn when a first token left.
    pub(crate) fn stamps(&self) -> &Arc<crate::netstamp::Stamps> {
        &self.1
    }
}

/// A TCP listener whose connections carry a [`ResetOnDrop`].
pub struct ResetListener(pub TcpListener);

/// One accepted connection.
pub struct ResetIo {
    tcp: StampedTcp,
    reset: ResetOnDrop,
}

impl Drop for ResetIo {
    fn drop(&mut self) {
        if self.reset.0.load(Ordering::Acquire) {
            // Closing with SO_LINGER 0 sends an RST and discards unsent data, as a crash would.
            let _ = self.tcp.tcp().set_zero_linger();
        }
    }
}

impl Listener for ResetListener {
    type Io = ResetIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (ResetIo, SocketAddr) {
        loop {
            match self.0.accept().await {
                Ok((tcp, addr)) => {
                    // Streams are many small writes: Nagle would distort the simulated timings.
                    let _ = tcp.set_nodelay(true);
                    // Requests are small: 4 KiB reads keep a connection's buffer small.
                    let tcp = StampedTcp::with_reads_of(tcp, 4096);
                    let reset = ResetOnDrop(Arc::default(), tcp.stamps());
                    return (ResetIo { tcp, reset }, addr);
                }
                Err(err) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!(%err, "mock: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

impl Connected<IncomingStream<'_, ResetListener>> for ResetOnDrop {
    fn connect_info(stream: IncomingStream<'_, ResetListener>) -> Self {
        stream.io().reset.clone()
    }
}

impl AsyncRead for ResetIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResetIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.tcp().is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
