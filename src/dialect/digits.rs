//! Counts and token ids written as decimal digits, for the writers of events.
//!
//! A translated stream writes a few numbers an event (an SGLang event's ids and counts).
//! `itoa` gives the digits as a slice of a length known only at run time, and copying that
//! into the output was a call to `memcpy` for one to six bytes (about 20 instructions each,
//! six calls a translated token). Under 10^8, the digits are made in one 64-bit word here
//! (in pairs, fours and eights, as `cursor::short_uint` reads them) and written as eight
//! bytes, of which only the digits are kept.

use bytes::{BufMut, BytesMut};

/// The numbers `eight` writes: under 10^8 (eight digits).
const EIGHT: u64 = 100_000_000;

/// `n`, under 10^8, as eight ASCII digits with leading zeros taken off: the digits in the
/// word's first bytes, and how many there are.
#[inline]
fn eight(n: u32) -> ([u8; 8], usize) {
    debug_assert!(u64::from(n) < EIGHT);
    // Four digits a 32-bit lane, the high four in the low lane (the first bytes).
    let fours = u64::from(n / 10_000) | (u64::from(n % 10_000) << 32);
    // Each lane split into hundreds (x * 10486 >> 20 is x / 100 below 10^4) and the rest.
    let hundreds = ((fours * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let pairs = hundreds | ((fours - hundreds * 100) << 16);
    // Each 16-bit lane split into tens (x * 103 >> 10 is x / 10 below 100) and ones.
    let tens = ((pairs * 103) >> 10) & 0x000f_000f_000f_000f;
    let digits = tens | ((pairs - tens * 10) << 8);
    // The leading zeros are the first bytes, each zero before the '0's go in: counted from
    // the low end and shifted out, the digits come first (zero keeps its one digit).
    let zeros = (digits.trailing_zeros() / 8).min(7);
    let word = (digits | 0x3030_3030_3030_3030) >> (8 * zeros);
    (word.to_le_bytes(), 8 - zeros as usize)
}

/// `n` in decimal at the end of `out`. Counts are often one or two digits (a stream's
/// first tokens, cached tokens): those are written as they are.
#[inline]
pub fn put_uint(out: &mut BytesMut, n: u64) {
    write_uint(out, n);
}

/// `n` in decimal at the end of `out` (as `put_uint`).
#[inline]
pub fn push_uint(out: &mut Vec<u8>, n: u64) {
    write_uint(out, n);
}

/// Where the digits go: the two byte buffers the writers use.
trait Out {
    fn put(&mut self, bytes: &[u8]);
    fn len(&self) -> usize;
    fn truncate(&mut self, len: usize);
}

impl Out for BytesMut {
    fn put(&mut self, bytes: &[u8]) {
        self.put_slice(bytes);
    }
    fn len(&self) -> usize {
        BytesMut::len(self)
    }
    fn truncate(&mut self, len: usize) {
        BytesMut::truncate(self, len);
    }
}

impl Out for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len);
    }
}

#[inline(always)]
fn write_uint(out: &mut impl Out, n: u64) {
    match n {
        0..10 => out.put(&[b'0' + n as u8]),
        10..100 => out.put(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8]),
        100..EIGHT => {
            let (word, len) = eight(n as u32);
            let at = out.len();
            out.put(&word);
            out.truncate(at + len);
        }
        _ => out.put(itoa::Buffer::new().format(n).as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    fn both(n: u64) -> (Vec<u8>, BytesMut) {
        let mut v = b"x".to_vec();
        push_uint(&mut v, n);
        let mut b = BytesMut::from(&b"x"[..]);
        put_uint(&mut b, n);
        (v, b)
    }

    #[test]
    fn digits_are_itoas() {
        // Bounded: every number under 10^6, the edges of each length, and 200,000 random
        // ones of every size, each written after a byte already there.
        let edges = (1..=19).flat_map(|p| {
            let t = 10u64.pow(p);
            [t - 1, t, t + 1]
        });
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let random = (0..200_000).map(|_| match rng.random_range(0..3) {
            0 => rng.random_range(0..EIGHT),
            1 => u64::from(rng.random::<u32>()),
            _ => rng.random(),
        });
        let all = (0..1_000_000).chain(edges).chain([u64::MAX]).chain(random);
        for n in all {
            if n < EIGHT {
                let (word, len) = eight(n as u32);
                assert_eq!(word[..len], n.to_string().as_bytes()[..], "{n}");
            }
            let want = format!("x{n}");
            let (v, b) = both(n);
            assert_eq!(v, want.as_bytes(), "{n}");
            assert_eq!(&b[..], want.as_bytes(), "{n}");
        }
    }
}
