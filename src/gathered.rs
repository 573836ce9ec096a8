//! Bodies gathered whole from their frames (an upstream's answer, a client's request).

use bytes::{Bytes, BytesMut};

/// A whole body from its frames. Most bodies arrive in one frame (one read): that frame is
/// the body, neither copied nor given a buffer of its own.
#[derive(Default)]
pub(crate) enum Gathered {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Gathered {
    pub(crate) fn len(&self) -> usize {
        match self {
            Gathered::Empty => 0,
            Gathered::One(b) => b.len(),
            Gathered::Many(b) => b.len(),
        }
    }

    pub(crate) fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        *self = match std::mem::take(self) {
            Gathered::Empty => Gathered::One(data),
            Gathered::One(first) => {
                let mut all = BytesMut::with_capacity(first.len() + data.len());
                all.extend_from_slice(&first);
                all.extend_from_slice(&data);
                Gathered::Many(all)
            }
            Gathered::Many(mut all) => {
                all.extend_from_slice(&data);
                Gathered::Many(all)
            }
        };
    }

    pub(crate) fn freeze(self) -> Bytes {
        match self {
            Gathered::Empty => Bytes::new(),
            Gathered::One(b) => b,
            Gathered::Many(b) => b.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_in_one_frame_is_that_frame_and_more_are_joined_in_order() {
        let one = Bytes::from_static(b"{\"a\":1}");
        let mut g = Gathered::default();
        assert_eq!(g.len(), 0);
        g.push(one.clone());
        let whole = g.freeze();
        assert_eq!(whole, one);
        assert_eq!(whole.as_ptr(), one.as_ptr(), "one frame is not copied");
        let mut g = Gathered::default();
        for part in ["ab", "", "cd", "e"] {
            g.push(Bytes::from(part));
        }
        assert_eq!(g.len(), 5);
        assert_eq!(g.freeze(), "abcde");
        assert_eq!(Gathered::default().freeze(), "");
    }
}
