//! The listening socket of `lingo serve`, and each worker's own socket in its group.
//!
//! With several workers, each holding a duplicate of one socket, every worker's epoll woke
//! for every new connection and whichever ran first took all that were queued: in runs of
//! the same benchmark the 32 or 64 connections were split 2:1 between the two workers, or
//! all went to one (one core serving, the other idle). So on
//! Linux the socket is bound with SO_REUSEPORT and every further worker binds one of its
//! own to the same address: the kernel spreads connections over the group by their
//! addresses, and a connection wakes only the worker whose socket it lands on.

use std::io;
use std::net::SocketAddr;

/// Bind `addr` for `workers` worker runtimes: as one group of sockets when there are
/// several (Linux), else a plain socket. An address in use is an error either way: it is
/// tried first by a bind that does not join groups, as a group would let a second lingo on
/// the same port share the traffic silently.
pub fn bind(addr: SocketAddr, workers: usize) -> io::Result<std::net::TcpListener> {
    if workers < 2 || !cfg!(target_os = "linux") {
        return plain(addr);
    }
    let probe = socket(addr)?;
    probe.bind(&addr.into())?;
    // Port 0 is now the port the system picked.
    let addr = probe
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("a TCP socket with no IP address"))?;
    drop(probe);
    member(addr)
}

/// A socket for another worker, in `first`'s group if it is in one (`None`: it is not, and
/// the worker shares `first`).
pub(super) fn next_member(
    first: &std::net::TcpListener,
) -> io::Result<Option<std::net::TcpListener>> {
    if !in_group(first)? {
        return Ok(None);
    }
    member(first.local_addr()?).map(Some)
}

fn plain(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = socket(addr)?;
    s.bind(&addr.into())?;
    listen(s)
}

/// A socket in the SO_REUSEPORT group bound to `addr`.
fn member(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let s = socket(addr)?;
    set_reuse_port(&s)?;
    s.bind(&addr.into())?;
    listen(s)
}

/// A TCP socket as tokio's `TcpListener::bind` makes one: SO_REUSEADDR, so a restart binds
/// over connections of the last run still in TIME_WAIT (a socket listening there still
/// refuses it).
fn socket(addr: SocketAddr) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    Ok(s)
}

/// Listening, with tokio's backlog, and non-blocking for tokio.
fn listen(s: socket2::Socket) -> io::Result<std::net::TcpListener> {
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

#[cfg(target_os = "linux")]
fn set_reuse_port(s: &socket2::Socket) -> io::Result<()> {
    s.set_reuse_port(true)
}

#[cfg(not(target_os = "linux"))]
fn set_reuse_port(_: &socket2::Socket) -> io::Result<()> {
    Ok(())
}

#[cfg(target_os = "linux")]
fn in_group(s: &std::net::TcpListener) -> io::Result<bool> {
    socket2::SockRef::from(s).reuse_port()
}

#[cfg(not(target_os = "linux"))]
fn in_group(_: &std::net::TcpListener) -> io::Result<bool> {
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_port() -> SocketAddr {
        "127.0.0.1:0".parse().expect("an address")
    }

    #[test]
    fn several_workers_get_a_group_one_gets_a_plain_socket() {
        let one = bind(any_port(), 1).unwrap();
        assert!(!in_group(&one).unwrap());
        assert!(
            next_member(&one).unwrap().is_none(),
            "the one socket is shared"
        );
        let first = bind(any_port(), 2).unwrap();
        if cfg!(target_os = "linux") {
            let second = next_member(&first).unwrap().expect("a socket of its own");
            assert_eq!(second.local_addr().unwrap(), first.local_addr().unwrap());
        }
    }

    #[test]
    fn an_address_in_use_is_an_error_even_for_a_group() {
        for workers in [1, 2] {
            let held = std::net::TcpListener::bind(any_port()).unwrap();
            let err = bind(held.local_addr().unwrap(), workers).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "workers = {workers}");
        }
        // Nor does a second group join the first.
        let first = bind(any_port(), 2).unwrap();
        let err = bind(first.local_addr().unwrap(), 2).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }
}
