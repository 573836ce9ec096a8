//! Idle keep-alive connections to one upstream address, newest first.

use std::io;
use std::sync::{Arc, Mutex, Weak};

use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::Settings;

/// One connection in use: the socket and what has been read from it but not yet consumed.
pub struct Conn {
    pub io: TcpStream,
    pub buf: BytesMut,
    pub(super) pool: Pool,
}

struct Idle {
    io: TcpStream,
    since: Instant,
    /// The runtime whose I/O driver the socket is registered with (`crate::shard`): only
    /// tasks of that runtime take it, as its readiness comes from that runtime alone.
    shard: u32,
}

struct Inner {
    /// `host:port` to connect to (brackets removed from an IPv6 literal).
    host: String,
    port: u16,
    settings: Settings,
    idle: Mutex<Vec<Idle>>,
}

/// The connections of one upstream; cheap to clone (one shared set).
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    pub fn new(host: &str, port: u16, settings: Settings) -> Pool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let inner = Arc::new(Inner {
            host,
            port,
            settings,
            idle: Mutex::new(Vec::new()),
        });
        spawn_reaper(Arc::downgrade(&inner));
        Pool { inner }
    }

    /// The newest idle connection still open. The check costs no system call: tokio knows
    /// from the last readiness event whether the server has written (or closed) since.
    pub(super) fn checkout(&self) -> Option<Conn> {
        let now = Instant::now();
        let timeout = self.inner.settings.idle_timeout;
        let shard = crate::shard::current();
        loop {
            let idle = {
                let mut idle = self.lock();
                let at = idle.iter().rposition(|c| c.shard == shard)?;
                idle.remove(at)
            };
            if now.duration_since(idle.since) >= timeout {
                continue;
            }
            // An idle connection has nothing to read: data or an end means it is unusable.
            match idle.io.try_read(&mut [0u8; 1]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Some(self.conn(idle.io));
                }
                _ => continue,
            }
        }
    }

    pub(super) async fn connect(&self) -> io::Result<Conn> {
        let s = &self.inner.settings;
        let addr = (self.inner.host.as_str(), self.inner.port);
        let io = match tokio::time::timeout(s.connect_timeout, TcpStream::connect(addr)).await {
            Err(_) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(r) => r?,
        };
        io.set_nodelay(true)?;
        // Notices a server that vanished while a long stream is quiet.
        let ka = socket2::TcpKeepalive::new().with_time(std::time::Duration::from_secs(60));
        socket2::SockRef::from(&io).set_tcp_keepalive(&ka)?;
        Ok(self.conn(io))
    }

    fn conn(&self, io: TcpStream) -> Conn {
        Conn {
            io,
            buf: BytesMut::new(),
            pool: self.clone(),
        }
    }

    /// Keep a connection whose response was read to the end, for the next request.
    pub(super) fn checkin(&self, io: TcpStream) {
        let now = Instant::now();
        let mut idle = self.lock();
        prune(&mut idle, now, self.inner.settings.idle_timeout);
        if idle.len() >= self.inner.settings.max_idle {
            idle.remove(0);
        }
        idle.push(Idle {
            io,
            since: now,
            shard: crate::shard::current(),
        });
    }

    /// Idle connections now held (for tests).
    #[cfg(test)]
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // A panic while holding the lock leaves a valid Vec: go on with it.
        self.inner.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drop the connections idle for `timeout` or longer (the oldest are first).
fn prune(idle: &mut Vec<Idle>, now: Instant, timeout: std::time::Duration) {
    let expired = idle
        .iter()
        .take_while(|c| now.duration_since(c.since) >= timeout)
        .count();
    idle.drain(..expired);
}

/// Close expired idle connections even when no request comes to notice them, so an idle
/// upstream does not keep lingo's file descriptors forever. Ends with the pool.
fn spawn_reaper(pool: Weak<Inner>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let period = match pool.upgrade() {
            Some(p) => p
                .settings
                .idle_timeout
                .max(std::time::Duration::from_millis(100)),
            None => return,
        };
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(p) = pool.upgrade() else { return };
            let mut idle = p.idle.lock().unwrap_or_else(|e| e.into_inner());
            prune(&mut idle, Instant::now(), p.settings.idle_timeout);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A connection is taken again only on the runtime (shard) that registered it.
    #[tokio::test]
    async fn an_idle_connection_is_taken_only_by_its_own_runtime() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = server.local_addr().unwrap().port();
        let settings = Settings {
            idle_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            max_idle: 8,
        };
        let pool = Pool::new("127.0.0.1", port, settings);
        crate::shard::set(1);
        let conn = pool.connect().await.unwrap();
        let _accepted = server.accept().await.unwrap();
        pool.checkin(conn.io);
        crate::shard::set(2);
        assert!(
            pool.checkout().is_none(),
            "shard 2 took shard 1's connection"
        );
        assert_eq!(pool.idle(), 1);
        crate::shard::set(1);
        assert!(pool.checkout().is_some(), "shard 1 lost its own connection");
        assert_eq!(pool.idle(), 0);
        crate::shard::set(0);
    }
}
