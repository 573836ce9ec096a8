//! Small byte strings that outlive the code that made them (a request's id, its body), cut
//! from blocks each thread keeps. Made as copies of their own, each was an allocation, and
//! its first clone a second (`Bytes` shares a buffer only once it is cloned). Cut from a
//! block, a clone only counts a reference; a block is reused in place once every string cut
//! from it is gone, and another is taken while any is kept (a stream keeps its request's).

use std::cell::RefCell;
use std::thread::LocalKey;

use bytes::{Bytes, BytesMut};

/// One thread's block for one kind of string: `thread_local!` with a `BytesMut` made by
/// `with_capacity(n)`, n the size of every block after it (or the string, if larger).
pub(crate) type Blocks = LocalKey<RefCell<BytesMut>>;

/// `data`, cut from this thread's block.
pub(crate) fn cut(blocks: &'static Blocks, data: &[u8]) -> Bytes {
    blocks.with_borrow_mut(|b| cut_from(b, data))
}

/// `data`, cut from `b`, a block its owner keeps (a connection's for its request heads).
pub(crate) fn cut_from(b: &mut BytesMut, data: &[u8]) -> Bytes {
    b.reserve(data.len());
    b.extend_from_slice(data);
    b.split().freeze()
}

/// The rest of this thread's block, with room for `room` bytes, to write a string into
/// (then `close`). Until it is back, a string cut meanwhile takes a block of its own.
pub(crate) fn open(blocks: &'static Blocks, room: usize) -> BytesMut {
    let mut b = blocks.with_borrow_mut(std::mem::take);
    b.reserve(room);
    b
}

/// What was written into `b` (from `open`) as a string, the rest of the block kept.
pub(crate) fn close(blocks: &'static Blocks, mut b: BytesMut) -> Bytes {
    let piece = b.split().freeze();
    blocks.set(b);
    piece
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: usize = 256;

    thread_local! {
        static TEST: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(BLOCK));
    }

    fn at(b: &Bytes) -> usize {
        b.as_ptr() as usize
    }

    #[test]
    fn strings_kept_stay_whole_and_a_block_is_reused_once_all_of_it_is_dropped() {
        // Past a block's room with every string kept: new blocks, nothing overwritten.
        let kept: Vec<_> = (0..100u32).map(|n| cut(&TEST, &n.to_be_bytes())).collect();
        for (n, b) in (0..100u32).zip(&kept) {
            assert_eq!(b[..], n.to_be_bytes());
        }
        let clone = kept[3].clone();
        assert_eq!(at(&clone), at(&kept[3]), "a clone shares the bytes");
        drop((kept, clone));
        // Dropped as they are made, past a block's room again: one block, reused.
        let spots: Vec<usize> = (0..100u32)
            .map(|n| at(&cut(&TEST, &n.to_be_bytes())))
            .collect();
        let (lo, hi) = (spots.iter().min().unwrap(), spots.iter().max().unwrap());
        assert!(hi - lo < BLOCK, "{lo:x}..{hi:x}");
    }

    #[test]
    fn a_string_larger_than_a_block_is_cut_whole() {
        let big = vec![7u8; 3 * BLOCK];
        assert_eq!(cut(&TEST, &big)[..], big[..]);
        assert_eq!(&cut(&TEST, b"after")[..], b"after");
    }
}
