//! DNS discovery: a `dns://NAME:PORT` endpoint stands for the name's A and AAAA records (a
//! Kubernetes headless Service has one per ready pod), re-resolved every `[discovery]
//! interval` and published on a `watch` channel. A failed or empty round keeps the last good
//! set: a resolver hiccup must not empty a pool that is serving.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_resolver::config::{NameServerConfigGroup, ResolveHosts, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::ProtoErrorKind;
use hickory_resolver::{Name, ResolveError, TokioResolver};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ConfigError;

/// The current addresses of one `dns://` endpoint, each with the URL's port.
pub type Addrs = Arc<BTreeSet<SocketAddr>>;

/// One DNS query (A or AAAA) gives up after the interval, within these bounds: an answer
/// later than the next round is as good as lost.
const QUERY_TIMEOUT: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(2));
/// How long [`Discovery::start`] waits for the first round before starting empty.
const FIRST_ROUND_BOUND: Duration = Duration::from_secs(5);
/// A failing name is logged at most this often (each round would be every `interval`).
const WARN_EVERY: Duration = Duration::from_secs(60);

/// `[discovery]`: how `dns://` endpoints are resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// How often each `dns://` name is resolved again. Default 5s (CoreDNS's TTL for
    /// Kubernetes records is 5s too).
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// The DNS server to ask, UDP and TCP (`"127.0.0.1:5353"`). Default: the system's
    /// resolver, with the search domains of `/etc/resolv.conf`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nameserver: Option<SocketAddr>,
}

impl Default for DiscoveryConfig {
    fn default() -> Self {
        DiscoveryConfig {
            interval: Duration::from_secs(5),
            nameserver: None,
        }
    }
}

impl DiscoveryConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        // Faster than this hammers the DNS server for changes no pod makes that quickly.
        if self.interval < Duration::from_millis(100) {
            return Err(invalid("discovery.interval", "must be at least 100ms"));
        }
        if let Some(ns) = self.nameserver {
            if ns.port() == 0 || ns.ip().is_unspecified() {
                return Err(invalid(
                    "discovery.nameserver",
                    "must be an address and port such as 127.0.0.1:53",
                ));
            }
        }
        Ok(())
    }
}

fn invalid(key: &'static str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        message: message.to_string(),
    }
}

/// `dns://NAME:PORT` (a trailing `/` is allowed) into its name and port. Refused, as `None`:
/// another scheme, no port or port 0, user info, a path, query or fragment, an IP address
/// (write `http://IP:PORT` for one server), and a name that is not a DNS name (an empty or
/// over-long label, a character other than letters, digits, `-` and `_`).
pub fn parse_dns_url(s: &str) -> Option<(String, u16)> {
    let scheme = s.get(..6)?;
    if !scheme.eq_ignore_ascii_case("dns://") {
        return None;
    }
    let rest = &s[6..];
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (name, port) = rest.rsplit_once(':')?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    dns_name(name).then(|| (name.to_string(), port))
}

fn dns_name(name: &str) -> bool {
    let bare = name.strip_suffix('.').unwrap_or(name);
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    !bare.is_empty()
        && bare.len() <= 253
        && bare.parse::<IpAddr>().is_err()
        && bare.split('.').all(label)
}

/// What joined and what left between two sets, each in address order.
pub fn diff(
    old: &BTreeSet<SocketAddr>,
    new: &BTreeSet<SocketAddr>,
) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    (
        new.difference(old).copied().collect(),
        old.difference(new).copied().collect(),
    )
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("`{0}` is not a DNS name")]
    Name(String),
    #[error("cannot read the system's resolver configuration: {0}")]
    SystemConfig(#[source] ResolveError),
}

/// A `dns://` endpoint being watched. Dropping it stops the re-resolving task; receivers
/// from [`Discovery::subscribe`] then see `changed()` fail and keep the last set.
#[derive(Debug)]
pub struct Discovery {
    rx: watch::Receiver<Addrs>,
    task: JoinHandle<()>,
}

impl Discovery {
    /// Resolves `name` once (waiting at most 5s; a failure starts with an empty set and is
    /// logged) and then every `config.interval`, for as long as the `Discovery` lives.
    pub async fn start(
        name: &str,
        port: u16,
        config: &DiscoveryConfig,
    ) -> Result<Discovery, DiscoveryError> {
        let fqdn = Name::from_str(name).map_err(|_| DiscoveryError::Name(name.to_string()))?;
        let mut rounds = Rounds {
            resolver: resolver(config)?,
            name: fqdn,
            port,
            failures: Failures::default(),
        };
        let first = tokio::time::timeout(FIRST_ROUND_BOUND, rounds.resolve()).await;
        let first = first.unwrap_or_else(|_| {
            rounds.failed(&"no answer within 5s");
            None
        });
        let (tx, rx) = watch::channel(Arc::new(first.unwrap_or_default()));
        let task = tokio::spawn(rounds.run(tx, config.interval));
        Ok(Discovery { rx, task })
    }

    /// A receiver of every new set (only changes are sent).
    pub fn subscribe(&self) -> watch::Receiver<Addrs> {
        self.rx.clone()
    }

    /// The set as of now.
    pub fn current(&self) -> Addrs {
        self.rx.borrow().clone()
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn resolver(config: &DiscoveryConfig) -> Result<TokioResolver, DiscoveryError> {
    let provider = TokioConnectionProvider::default();
    let mut builder = match config.nameserver {
        Some(ns) => {
            let servers = NameServerConfigGroup::from_ips_clear(&[ns.ip()], ns.port(), true);
            let config = ResolverConfig::from_parts(None, vec![], servers);
            let mut builder = TokioResolver::builder_with_config(config, provider);
            // A named server is asked, not /etc/hosts.
            builder.options_mut().use_hosts_file = ResolveHosts::Never;
            builder
        }
        None => TokioResolver::builder(provider).map_err(DiscoveryError::SystemConfig)?,
    };
    let opts = builder.options_mut();
    // The published set is the cache: the resolver keeps no answer past its round, so each
    // round really asks the server and sees a pod that left within one interval.
    opts.positive_max_ttl = Some(Duration::ZERO);
    opts.negative_max_ttl = Some(Duration::ZERO);
    opts.timeout = config.interval.clamp(QUERY_TIMEOUT.0, QUERY_TIMEOUT.1);
    opts.attempts = 1;
    Ok(builder.build())
}

/// The re-resolving loop of one name.
struct Rounds {
    resolver: TokioResolver,
    name: Name,
    port: u16,
    failures: Failures,
}

impl Rounds {
    async fn run(mut self, tx: watch::Sender<Addrs>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is now, and `start` has just resolved
        loop {
            tick.tick().await;
            let Some(new) = self.resolve().await else {
                continue;
            };
            // This task is the only sender, so nothing changes between the look and the send.
            if **tx.borrow() == new {
                continue;
            }
            log_change(&self.name, &tx.borrow(), &new);
            tx.send_replace(Arc::new(new));
        }
    }

    /// One round: the new set, or `None` (logged) to keep the last good one.
    async fn resolve(&mut self) -> Option<BTreeSet<SocketAddr>> {
        match self.lookup().await {
            Ok(set) if set.is_empty() => {
                self.failed(&"no A or AAAA records");
                None
            }
            Ok(set) => {
                self.failures.recovered(&self.name);
                Some(set)
            }
            Err(e) => {
                self.failed(&e);
                None
            }
        }
    }

    /// A and AAAA asked together; either failing fails the round, so that a lost A answer
    /// does not drop every IPv4 endpoint for an interval.
    async fn lookup(&self) -> Result<BTreeSet<SocketAddr>, ResolveError> {
        let (v4, v6) = tokio::join!(
            self.resolver.ipv4_lookup(self.name.clone()),
            self.resolver.ipv6_lookup(self.name.clone())
        );
        let v4 = empty_if_no_data(v4.map(|l| l.iter().map(|a| IpAddr::V4(a.0)).collect()))?;
        let v6 = empty_if_no_data(v6.map(|l| l.iter().map(|a| IpAddr::V6(a.0)).collect()))?;
        let port = self.port;
        Ok(v4
            .into_iter()
            .chain(v6)
            .map(|ip| SocketAddr::new(ip, port))
            .collect())
    }

    fn failed(&mut self, why: &dyn std::fmt::Display) {
        if self.failures.failed() {
            let (name, n) = (&self.name, self.failures.count);
            let kept = "the last good set is kept";
            tracing::warn!(%name, failed_rounds = n, "dns discovery: {why}; {kept}");
        }
    }
}

fn log_change(name: &Name, old: &BTreeSet<SocketAddr>, new: &BTreeSet<SocketAddr>) {
    let (added, removed) = diff(old, new);
    // Counts at info (a Service of 1,000 pods would flood it), the addresses at debug.
    let (n, a, r) = (new.len(), added.len(), removed.len());
    tracing::info!(%name, addresses = n, added = a, removed = r, "dns discovery: new set");
    tracing::debug!(%name, ?added, ?removed, "dns discovery: changes");
}

/// An authoritative "no such records" (NOERROR without answers, or NXDOMAIN) is an empty
/// family; SERVFAIL, a timeout or a refused query is a failure.
fn empty_if_no_data(r: Result<Vec<IpAddr>, ResolveError>) -> Result<Vec<IpAddr>, ResolveError> {
    match r {
        Err(e) if no_data(&e) => Ok(Vec::new()),
        other => other,
    }
}

fn no_data(e: &ResolveError) -> bool {
    matches!(
        e.proto().map(|p| p.kind()),
        Some(ProtoErrorKind::NoRecordsFound {
            response_code: ResponseCode::NoError | ResponseCode::NXDomain,
            ..
        })
    )
}

/// A streak of failed rounds, logged when it starts and then at most every [`WARN_EVERY`].
#[derive(Default)]
struct Failures {
    count: u64,
    warned: Option<Instant>,
}

impl Failures {
    /// Counts a failure; true when it should be logged.
    fn failed(&mut self) -> bool {
        self.count += 1;
        let due = self.warned.is_none_or(|t| t.elapsed() >= WARN_EVERY);
        if due {
            self.warned = Some(Instant::now());
        }
        due
    }

    fn recovered(&mut self, name: &Name) {
        if self.count > 0 {
            tracing::info!(%name, failed_rounds = self.count, "dns discovery: resolves again");
        }
        *self = Failures::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_urls() {
        let ok =
            |s: &str, name: &str, port| assert_eq!(parse_dns_url(s), Some((name.into(), port)));
        ok("dns://vllm.default.svc:8000", "vllm.default.svc", 8000);
        ok(
            "DNS://vllm-dflash.default.svc.cluster.local.:8000/",
            "vllm-dflash.default.svc.cluster.local.",
            8000,
        );
        ok("dns://_svc.x:1", "_svc.x", 1);
        for bad in [
            "http://vllm:8000",
            "dns://vllm",
            "dns://vllm:",
            "dns://vllm:0",
            "dns://vllm:+80",
            "dns://vllm:65536",
            "dns://:8000",
            "dns://user@vllm:8000",
            "dns://vllm:8000/v1",
            "dns://vllm:8000?x=1",
            "dns://10.0.0.5:8000",
            "dns://[::1]:8000",
            "dns://a..b:8000",
            "dns://-a.b:8000",
            "dns://a b:8000",
            "dns:/",
        ] {
            assert_eq!(parse_dns_url(bad), None, "{bad}");
        }
        let long = format!("dns://{}.x:80", "a".repeat(64));
        assert_eq!(parse_dns_url(&long), None);
    }

    #[test]
    fn diff_names_both_sides() {
        let set = |ports: &[u16]| -> BTreeSet<SocketAddr> {
            ports
                .iter()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                .collect()
        };
        let (added, removed) = diff(&set(&[1, 2, 3]), &set(&[2, 3, 4, 5]));
        assert_eq!(added, set(&[4, 5]).into_iter().collect::<Vec<_>>());
        assert_eq!(removed, set(&[1]).into_iter().collect::<Vec<_>>());
        assert_eq!(diff(&set(&[1]), &set(&[1])), (vec![], vec![]));
    }

    #[test]
    fn config_defaults_and_keys() {
        let c: DiscoveryConfig = toml::from_str("").unwrap();
        assert_eq!(c, DiscoveryConfig::default());
        assert_eq!(c.interval, Duration::from_secs(5));
        c.validate().unwrap();
        let c: DiscoveryConfig =
            toml::from_str("interval = \"250ms\"\nnameserver = \"127.0.0.1:5353\"").unwrap();
        assert_eq!(c.nameserver, Some(SocketAddr::from(([127, 0, 0, 1], 5353))));
        c.validate().unwrap();
        assert!(toml::from_str::<DiscoveryConfig>("intervall = \"1s\"").is_err());
        for (text, key) in [
            ("interval = \"10ms\"", "discovery.interval"),
            ("nameserver = \"127.0.0.1:0\"", "discovery.nameserver"),
            ("nameserver = \"0.0.0.0:53\"", "discovery.nameserver"),
        ] {
            let c: DiscoveryConfig = toml::from_str(text).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn failures_are_logged_once_per_period() {
        let mut f = Failures::default();
        assert!(f.failed());
        assert!(!f.failed());
        assert_eq!(f.count, 2);
        f.warned = Instant::now().checked_sub(WARN_EVERY);
        assert!(f.failed());
    }
}
