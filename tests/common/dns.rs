//! A DNS server for tests: UDP and TCP on one 127.0.0.1 port, answering A and AAAA queries
//! from records the test changes while it runs, or failing on demand. Messages are read and
//! written with hickory-proto (already built for lingo's resolver), so this adds no crate.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, AAAA};
use hickory_resolver::proto::rr::{RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// From the records (NXDOMAIN for an unknown name).
    Answer,
    /// SERVFAIL to everything.
    ServFail,
    /// Nothing: UDP queries are dropped, TCP connections closed.
    Silent,
}

struct State {
    /// Lower-case name with its final dot, to its addresses.
    records: Mutex<BTreeMap<String, Vec<IpAddr>>>,
    mode: Mutex<Mode>,
    /// Queries received, in every mode.
    queries: watch::Sender<usize>,
}

pub struct DnsServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

impl DnsServer {
    pub async fn start() -> DnsServer {
        let (udp, tcp) = bind_pair().await;
        let addr = udp.local_addr().unwrap();
        let state = Arc::new(State {
            records: Mutex::new(BTreeMap::new()),
            mode: Mutex::new(Mode::Answer),
            queries: watch::Sender::new(0),
        });
        let tasks = vec![
            tokio::spawn(serve_udp(udp, state.clone())),
            tokio::spawn(serve_tcp(tcp, state.clone())),
        ];
        DnsServer { addr, state, tasks }
    }

    /// Replaces `name`'s records (an empty list leaves the name with no A or AAAA).
    pub fn set(&self, name: &str, ips: &[IpAddr]) {
        let key = name.trim_end_matches('.').to_ascii_lowercase() + ".";
        self.state.records.lock().unwrap().insert(key, ips.to_vec());
    }

    /// Forgets `name` (NXDOMAIN from now on).
    pub fn remove(&self, name: &str) {
        let key = name.trim_end_matches('.').to_ascii_lowercase() + ".";
        self.state.records.lock().unwrap().remove(&key);
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.state.mode.lock().unwrap() = mode;
    }

    pub fn queries(&self) -> usize {
        *self.state.queries.borrow()
    }

    /// Waits (at most `bound`) until `n` more queries than `since` have arrived.
    pub async fn wait_queries(&self, since: usize, n: usize, bound: Duration) {
        let mut rx = self.state.queries.subscribe();
        tokio::time::timeout(bound, rx.wait_for(|q| *q >= since + n))
            .await
            .expect("the DNS server was not asked again")
            .unwrap();
    }
}

/// A UDP socket and a TCP listener on the same free port (the resolver asks both there).
async fn bind_pair() -> (UdpSocket, TcpListener) {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = udp.local_addr().unwrap().port();
        if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)).await {
            return (udp, tcp);
        }
    }
    panic!("no port free for both UDP and TCP");
}

async fn serve_udp(socket: UdpSocket, state: Arc<State>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Some((query, answer)) = respond(&state, &buf[..n]) else {
            continue;
        };
        let mut bytes = answer.to_vec().unwrap();
        if bytes.len() > usize::from(query.max_payload()) {
            bytes = answer.truncate().to_vec().unwrap();
        }
        let _ = socket.send_to(&bytes, peer).await;
    }
}

async fn serve_tcp(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(serve_conn(stream, state.clone()));
    }
}

async fn serve_conn(mut stream: TcpStream, state: Arc<State>) {
    loop {
        let Ok(len) = stream.read_u16().await else {
            return;
        };
        let mut buf = vec![0u8; usize::from(len)];
        if stream.read_exact(&mut buf).await.is_err() {
            return;
        }
        let Some((_, answer)) = respond(&state, &buf) else {
            return;
        };
        let bytes = answer.to_vec().unwrap();
        let len = u16::try_from(bytes.len()).unwrap();
        if stream.write_u16(len).await.is_err() || stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// The query and its answer, or `None` to stay silent.
fn respond(state: &State, bytes: &[u8]) -> Option<(Message, Message)> {
    state.queries.send_modify(|q| *q += 1);
    let query = Message::from_vec(bytes).ok()?;
    let mode = *state.mode.lock().unwrap();
    let mut answer = Message::new();
    answer
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_authoritative(true)
        .add_queries(query.queries().to_vec());
    match mode {
        Mode::Silent => return None,
        Mode::ServFail => {
            answer.set_response_code(ResponseCode::ServFail);
        }
        Mode::Answer => answer_from_records(state, &query, &mut answer),
    }
    Some((query, answer))
}

fn answer_from_records(state: &State, query: &Message, answer: &mut Message) {
    let Some(q) = query.query() else {
        answer.set_response_code(ResponseCode::FormErr);
        return;
    };
    let key = q.name().to_ascii().to_ascii_lowercase();
    let records = state.records.lock().unwrap();
    let Some(ips) = records.get(&key) else {
        answer.set_response_code(ResponseCode::NXDomain);
        return;
    };
    for ip in ips {
        let rdata = match (ip, q.query_type()) {
            (IpAddr::V4(v4), RecordType::A) => RData::A(A(*v4)),
            (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(*v6)),
            _ => continue,
        };
        // An hour: a resolver that cached answers would miss every change.
        answer.add_answer(Record::from_rdata(q.name().clone(), 3600, rdata));
    }
}
