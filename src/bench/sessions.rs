//! Replayed conversations: a request log's lines that name a session are sent in their
//! order, each after the previous of its session ended, with prompts that extend that
//! session's previous prompt (the same generator from the session's first line on, so each
//! shares the earlier prompt as its prefix, as the originals did), at the logged lengths.

use std::collections::HashMap;

use tokio::sync::Semaphore;

use super::dataset::Logged;

/// Per line of a log: the line before it of its session, and its session's first line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Links {
    pub prev: Vec<Option<usize>>,
    pub root: Vec<Option<usize>>,
}

impl Links {
    /// Of a log in arrival order; `None` when no line names a session.
    pub fn of(log: &[Logged]) -> Option<Links> {
        let mut last: HashMap<&str, (usize, usize)> = HashMap::new();
        let mut links = Links::default();
        for (i, l) in log.iter().enumerate() {
            let (prev, root) = match l.session.as_deref() {
                Some(s) => {
                    let seen = last.get(s).copied();
                    let root = seen.map_or(i, |(_, r)| r);
                    last.insert(s, (i, root));
                    (seen.map(|(p, _)| p), Some(root))
                }
                None => (None, None),
            };
            links.prev.push(prev);
            links.root.push(root);
        }
        (!last.is_empty()).then_some(links)
    }
}

/// The running order of a level's replayed sessions: line i may leave once line `prev[i]`
/// has ended.
pub struct Order {
    prev: Vec<Option<usize>>,
    /// One permit is added to `ended[i]` when line i ended; only its successor takes it.
    ended: Vec<Semaphore>,
}

impl Order {
    pub fn new(links: &Links) -> Order {
        Order {
            prev: links.prev.clone(),
            ended: links.prev.iter().map(|_| Semaphore::new(0)).collect(),
        }
    }

    /// Wait until the previous line of `index`'s session has ended.
    pub async fn wait(&self, index: usize) {
        let prev = self.prev.get(index).copied().flatten();
        if let Some(sem) = prev.and_then(|p| self.ended.get(p)) {
            // The semaphore is never closed; an error could only mean that, and then waiting
            // is pointless anyway.
            let _ = sem.acquire().await;
        }
    }

    /// Line `index` ended (successfully or not): its successor may go.
    pub fn ended(&self, index: usize) {
        if let Some(sem) = self.ended.get(index) {
            sem.add_permits(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(session: Option<&str>) -> Logged {
        Logged {
            time: 0.0,
            prompt_tokens: 1,
            completion_tokens: 1,
            session: session.map(str::to_string),
        }
    }

    #[test]
    fn links_follow_each_session() {
        let log = [
            line(Some("a")),
            line(None),
            line(Some("b")),
            line(Some("a")),
            line(Some("a")),
            line(Some("b")),
        ];
        let l = Links::of(&log).unwrap();
        assert_eq!(l.prev, [None, None, None, Some(0), Some(3), Some(2)]);
        assert_eq!(l.root, [Some(0), None, Some(2), Some(0), Some(0), Some(2)]);
        assert!(Links::of(&[line(None)]).is_none());
    }

    #[tokio::test]
    async fn a_line_waits_for_its_predecessor() {
        let l = Links::of(&[line(Some("a")), line(Some("a"))]).unwrap();
        let order = std::sync::Arc::new(Order::new(&l));
        order.wait(0).await;
        let o = order.clone();
        let waiter = tokio::spawn(async move { o.wait(1).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        order.ended(0);
        waiter.await.unwrap();
    }
}
