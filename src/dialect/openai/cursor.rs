//! One pass over JSON text that answers only when it is sure to agree with serde: the
//! shared reader of `scan` (stream events) and `summary` (whole responses). Every method
//! gives `None` for anything it is not sure of, and the caller then reads the text with
//! serde instead.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;

/// Nesting skipped inside an unknown value; serde's own limit (128 levels) is further.
const MAX_DEPTH: usize = 64;

/// The longest integer part of a number read into a `Value`: serde refuses a float past
/// `f64::MAX` (309 digits); anything shorter, without an exponent, is finite.
const MAX_INT_DIGITS: usize = 300;

/// `None` throughout: not sure, read it with serde.
pub(crate) type Sure<T> = Option<T>;

/// The known fields of one object met so far: serde refuses a field given twice.
#[derive(Default)]
pub(crate) struct Seen(u32);

impl Seen {
    pub(crate) fn first(&mut self, field: u32) -> Sure<()> {
        let bit = 1 << field;
        let new = self.0 & bit == 0;
        self.0 |= bit;
        new.then_some(())
    }

    /// Whether `field` was met.
    pub(crate) fn has(&self, field: u32) -> bool {
        self.0 & (1 << field) != 0
    }
}

/// Bytes that end a plain run inside a string: the quote, the backslash, and the control
/// characters JSON forbids there.
const STOPS: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The high bit of each byte of `word` (eight bytes, the first lowest) that is a quote, a
/// backslash or under 0x20: the lowest one flagged is exact (a borrow may flag bytes above
/// it, never below), so whether any is flagged is exact too.
#[inline]
pub(crate) fn stop_flags(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let quote = word ^ (ONES * u64::from(b'"'));
    let slash = word ^ (ONES * u64::from(b'\\'));
    (quote.wrapping_sub(ONES) & !quote
        | slash.wrapping_sub(ONES) & !slash
        | word.wrapping_sub(ONES * 0x20) & !word)
        & HIGH
}

/// How far `bytes` runs before a quote or backslash, or `None` when neither comes or a raw
/// control character comes first. Eight bytes a step (a byte-wise table walk cost a
/// response's text and keys about 5 instructions a byte), the rest by the table.
#[inline]
pub(crate) fn plain_run(bytes: &[u8]) -> Sure<usize> {
    let mut at = 0;
    for chunk in bytes.chunks_exact(8) {
        let flags = stop_flags(u64::from_le_bytes(chunk.try_into().ok()?));
        if flags != 0 {
            at += flags.trailing_zeros() as usize / 8;
            return matches!(bytes[at], b'"' | b'\\').then_some(at);
        }
        at += 8;
    }
    let end = bytes[at..].iter().position(|&b| STOPS[usize::from(b)])? + at;
    matches!(bytes[end], b'"' | b'\\').then_some(end)
}

/// Whether `bytes` begins with the constant `key`. Compared as arrays of a known length,
/// which the compiler does with a few loads, where a slice's `starts_with` calls `memcmp`
/// (a call and its setup for a dozen bytes, several times an event).
#[inline]
pub(crate) fn begins<const N: usize>(bytes: &[u8], key: &[u8; N]) -> bool {
    bytes.first_chunk::<N>() == Some(key)
}

/// Whether any byte of `bytes` is a quote, a backslash or under 0x20 (what a JSON string
/// must escape): eight bytes a step, the rest by the table.
#[inline]
pub(crate) fn has_stop(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let any = words.any(|w| {
        let word = u64::from_le_bytes(w.try_into().unwrap_or_default());
        stop_flags(word) != 0
    });
    any || words.remainder().iter().any(|&b| STOPS[usize::from(b)])
}

/// A plain unsigned integer at the start of `bytes` (digits, no leading zero) and the bytes
/// it took, or `None` when there is none or it is past `u64`. One pass, each byte tested and
/// folded in the same step, unchecked for the first 19 digits (they fit a `u64`):
/// `str::parse` cost a hundred instructions a token id, and a count of the digits before
/// folding them half of that.
///
/// A number of at most seven digits with eight bytes to read (a token id, a count, inside
/// any event) is read eight bytes at once (`short_uint`): about 11 instructions a digit
/// byte by byte, fewer than 30 for the whole number at once.
#[inline]
pub(crate) fn plain_uint(bytes: &[u8]) -> Sure<(u64, usize)> {
    if let Some(word) = bytes.first_chunk::<8>() {
        if let Some((value, n)) = short_uint(u64::from_le_bytes(*word)) {
            return plain(bytes, n).then_some((value, n));
        }
    }
    long_uint(bytes)
}

/// The digits that begin `word` (eight bytes, the first lowest) and how many, when they
/// are one to seven and a byte that is not a digit ends them; else `None`.
#[inline]
fn short_uint(word: u64) -> Option<(u64, usize)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte is a digit when its high nibble is 3 and adding 6 keeps it so. A carry out of
    // a byte that is not a digit only reaches bytes after it, which are not read.
    let off = ((word & (ONES * 0xF0)) ^ (ONES * 0x30))
        | ((word.wrapping_add(ONES * 0x06) & (ONES * 0xF0)) ^ (ONES * 0x30));
    // The high bit of every byte of `off` that is not zero: the bytes that are not digits.
    let stops = (off | ((off & !HIGH) + ONES * 0x7F)) & HIGH;
    let n = (stops.trailing_zeros() / 8) as usize;
    if n == 0 || n == 8 {
        return None;
    }
    // The n digits as values, moved to the high end so that the bytes before them (zeros)
    // are leading zeros; then fold pairs, fours and eights of digits.
    let d = (word.wrapping_sub(ONES * 0x30)) << (8 * (8 - n));
    let d = d.wrapping_mul(10).wrapping_add(d >> 8);
    let d = ((d & 0x0000_00FF_0000_00FF).wrapping_mul(100 + (1_000_000 << 32))
        + ((d >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(1 + (10_000 << 32)))
        >> 32;
    Some((d, n))
}

/// `plain_uint` a byte at a time.
fn long_uint(bytes: &[u8]) -> Sure<(u64, usize)> {
    let (mut n, mut value) = (0, 0u64);
    while n < bytes.len().min(19) {
        let d = bytes[n].wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        value = value * 10 + u64::from(d);
        n += 1;
    }
    while let Some(d) = bytes
        .get(n)
        .map(|b| b.wrapping_sub(b'0'))
        .filter(|&d| d <= 9)
    {
        value = value.checked_mul(10)?.checked_add(u64::from(d))?;
        n += 1;
    }
    plain(bytes, n).then_some((value, n))
}

/// Whether the `n` digits `bytes` begins with are a number as JSON spells it: at least one,
/// and no leading zero.
#[inline]
pub(crate) fn plain(bytes: &[u8], n: usize) -> bool {
    n == 1 || (n > 1 && bytes[0] != b'0')
}

/// Each id of an array of `u32` ids in its plainest spelling (`[`, digits with no leading
/// zero, commas, `]`: no spaces) to `each`, and the bytes it took; any other spelling, or an
/// id past `u32`, is not sure.
#[inline]
pub(crate) fn each_plain_id(bytes: &[u8], mut each: impl FnMut(u32)) -> Sure<usize> {
    let mut at = 1;
    (bytes.first() == Some(&b'[')).then_some(())?;
    if bytes.get(at) == Some(&b']') {
        return Some(at + 1);
    }
    loop {
        let (value, digits) = plain_uint(&bytes[at..])?;
        each(u32::try_from(value).ok()?);
        at += digits;
        match bytes.get(at) {
            Some(b',') => at += 1,
            Some(b']') => return Some(at + 1),
            _ => return None,
        }
    }
}

pub(crate) struct Cursor<'a> {
    pub(crate) text: &'a str,
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(text: &'a str) -> Cursor<'a> {
        Cursor {
            text,
            bytes: text.as_bytes(),
            at: 0,
        }
    }

    pub(crate) fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Only whitespace is left, as serde wants after a document.
    pub(crate) fn end(&mut self) -> Sure<()> {
        self.ws();
        (self.at == self.bytes.len()).then_some(())
    }

    /// The next byte after whitespace.
    pub(crate) fn peek(&mut self) -> Sure<u8> {
        self.ws();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Sure<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// `{ "key": value, ... }`, `each` reading every value after its key.
    pub(crate) fn object(&mut self, each: impl FnMut(&mut Self, &'a str) -> Sure<()>) -> Sure<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        self.members(each)
    }

    /// The rest of an object after one member's value: `, "key": value ... }` or `}`.
    pub(crate) fn members_after(
        &mut self,
        each: impl FnMut(&mut Self, &'a str) -> Sure<()>,
    ) -> Sure<()> {
        match self.peek()? {
            b'}' => {
                self.at += 1;
                Some(())
            }
            b',' => {
                self.at += 1;
                self.members(each)
            }
            _ => None,
        }
    }

    /// `"key": value, ... }`, `each` reading every value after its key.
    fn members(&mut self, mut each: impl FnMut(&mut Self, &'a str) -> Sure<()>) -> Sure<()> {
        loop {
            // An escaped key could still name a field: serde's to match.
            let Cow::Borrowed(key) = self.string()? else {
                return None;
            };
            self.eat(b':')?;
            each(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string and, when it is borrowed from this event, where it lies in it.
    pub(crate) fn located_string(&mut self) -> Sure<(Cow<'a, str>, Option<Range<usize>>)> {
        let s = self.string()?;
        let at = match &s {
            Cow::Borrowed(b) => {
                let start = b.as_ptr() as usize - self.text.as_ptr() as usize;
                Some(start..start + b.len())
            }
            Cow::Owned(_) => None,
        };
        Some((s, at))
    }

    pub(crate) fn array<T>(&mut self, each: impl FnMut(&mut Self) -> Sure<T>) -> Sure<Vec<T>> {
        self.array_into(each)
    }

    /// `array`, into any collection (a `SmallVec` keeps a short one off the heap).
    pub(crate) fn array_into<T, C: Default + Extend<T>>(
        &mut self,
        each: impl FnMut(&mut Self) -> Sure<T>,
    ) -> Sure<C> {
        self.eat(b'[')?;
        self.items(C::default(), each)
    }

    /// The items of an array whose `[` is read, each read by `each` into `out`.
    fn items<T, C: Extend<T>>(
        &mut self,
        mut out: C,
        mut each: impl FnMut(&mut Self) -> Sure<T>,
    ) -> Sure<C> {
        if self.peek()? == b']' {
            self.at += 1;
            return Some(out);
        }
        loop {
            out.extend(Some(each(self)?));
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    /// `null` as `None`, anything else read by `read` (serde's `Option`).
    pub(crate) fn nullable<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Sure<T>,
    ) -> Sure<Option<T>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            _ => read(self).map(Some),
        }
    }

    /// An `Option<Value>` field: serde reads the value's own text.
    pub(crate) fn value(&mut self) -> Sure<Option<Value>> {
        self.nullable(|c| serde_json::from_str(c.raw()?).ok())
    }

    /// A string, borrowed when it has no escapes (as serde's `Cow` borrows); with them, its
    /// exact text unescaped by serde.
    pub(crate) fn string(&mut self) -> Sure<Cow<'a, str>> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at;
        let end = plain_run(&self.bytes[start + 1..])? + start + 1;
        if self.bytes[end] == b'"' {
            self.at = end + 1;
            return Some(Cow::Borrowed(&self.text[start + 1..end]));
        }
        self.skip_string()?;
        let token = &self.text[start..self.at];
        serde_json::from_str::<String>(token).ok().map(Cow::Owned)
    }

    /// A `u32` as serde reads one: digits only, no leading zero, in range. A sign is left
    /// to serde; a fraction or exponent (a float to serde) stops the digits short of the
    /// `,` `}` or `]` the caller then wants, so it goes to serde too.
    pub(crate) fn u32(&mut self) -> Sure<u32> {
        self.uint()
    }

    /// An unsigned integer of type `T`, read as `u32` is (`plain_uint`); past `T`, it is
    /// not sure.
    pub(crate) fn uint<T: TryFrom<u64>>(&mut self) -> Sure<T> {
        self.ws();
        let (value, n) = plain_uint(&self.bytes[self.at..])?;
        self.at += n;
        T::try_from(value).ok()
    }

    /// A list of `u32` token ids, allocated once at its length: read onto the stack first
    /// (a list of up to `STACK_IDS`), where counting its commas before reading it cost a
    /// pass over its bytes (and growing a `Vec` one push at a time, three reallocations for
    /// 16 ids).
    ///
    /// A list in the plainest spelling (digits and commas, `each_plain_id`) is read in one
    /// pass, without a peek for spaces around each id (about 60 instructions an id, 13
    /// fewer than item by item). Any other spelling is read item by item.
    pub(crate) fn ids(&mut self) -> Sure<Vec<u32>> {
        const STACK_IDS: usize = 64;
        type Ids = smallvec::SmallVec<[u32; STACK_IDS]>;
        self.ws();
        let mut ids = Ids::new();
        if let Some(len) = each_plain_id(&self.bytes[self.at..], |id| ids.push(id)) {
            self.at += len;
            return Some(ids.to_vec());
        }
        self.eat(b'[')?;
        self.items(Ids::new(), Cursor::u32).map(|ids| ids.to_vec())
    }

    /// How many `u32` ids a list holds, read as `ids` reads them.
    pub(crate) fn id_count(&mut self) -> Sure<u64> {
        self.ws();
        let mut n = 0u64;
        if let Some(len) = each_plain_id(&self.bytes[self.at..], |_| n += 1) {
            self.at += len;
            return Some(n);
        }
        let ids = self.array(|c| c.u32().map(drop))?;
        Some(ids.len() as u64)
    }

    /// The exact text of the next value.
    pub(crate) fn raw(&mut self) -> Sure<&'a str> {
        self.ws();
        let start = self.at;
        self.skip_value(0)?;
        Some(&self.text[start..self.at])
    }

    /// Step over one well-formed value, as serde steps over a field it ignores.
    pub(crate) fn skip_value(&mut self, depth: usize) -> Sure<()> {
        self.walk_value(depth, false)
    }

    /// Step over one value that serde would read into a `Value` without error: as
    /// `skip_value`, but its strings must make characters and its numbers finite floats.
    pub(crate) fn check_value(&mut self, depth: usize) -> Sure<()> {
        self.walk_value(depth, true)
    }

    /// `skip_value` (not `strict`) or `check_value` (`strict`).
    fn walk_value(&mut self, depth: usize, strict: bool) -> Sure<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' if strict => self.check_string(),
            b'"' => self.skip_string(),
            b'{' => self.object(|c, _| c.walk_value(depth + 1, strict)),
            b'[' => self.array(|c| c.walk_value(depth + 1, strict)).map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => {
                let (int_digits, exponent) = self.skip_number()?;
                (!strict || (int_digits <= MAX_INT_DIGITS && !exponent)).then_some(())
            }
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Sure<()> {
        self.bytes[self.at..]
            .starts_with(word)
            .then(|| self.at += word.len())
    }

    /// A string with its escapes checked as serde checks them (any four hex digits after
    /// `\u`: whether they make a character is the reader's business).
    fn skip_string(&mut self) -> Sure<()> {
        self.eat(b'"')?;
        loop {
            self.at += plain_run(&self.bytes[self.at..])?;
            if self.bytes[self.at] == b'"' {
                self.at += 1;
                return Some(());
            }
            self.at += 1;
            match *self.bytes.get(self.at)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                b'u' => drop(self.hex_escape()?),
                _ => return None,
            }
        }
    }

    /// A string as serde reads one into a `String`: as `skip_string`, and every `\u`
    /// escape makes a character, a surrogate only as the first of a pair followed at once
    /// by the second (serde's other answers for surrogates are left to serde).
    pub(crate) fn check_string(&mut self) -> Sure<()> {
        self.eat(b'"')?;
        loop {
            self.at += plain_run(&self.bytes[self.at..])?;
            if self.bytes[self.at] == b'"' {
                self.at += 1;
                return Some(());
            }
            self.at += 1;
            match *self.bytes.get(self.at)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                b'u' => match self.hex_escape()? {
                    0xD800..=0xDBFF => {
                        if !self.bytes[self.at..].starts_with(b"\\u") {
                            return None;
                        }
                        self.at += 1;
                        if !(0xDC00..=0xDFFF).contains(&self.hex_escape()?) {
                            return None;
                        }
                    }
                    0xDC00..=0xDFFF => return None,
                    _ => {}
                },
                _ => return None,
            }
        }
    }

    /// `uXXXX` (after its backslash): the code unit, and the cursor past it.
    fn hex_escape(&mut self) -> Sure<u16> {
        let hex = self.bytes.get(self.at + 1..self.at + 5)?;
        if !hex.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        self.at += 5;
        let hex = std::str::from_utf8(hex).ok()?;
        u16::from_str_radix(hex, 16).ok()
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`: how many digits its integer part
    /// has, and whether it has an exponent.
    fn skip_number(&mut self) -> Sure<(usize, bool)> {
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let start = self.at;
        match *self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        let int_digits = self.at - start;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        let exponent = matches!(self.bytes.get(self.at), Some(b'e' | b'E'));
        if exponent {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Some((int_digits, exponent))
    }

    fn digits(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Sure<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }
}

/// One to three random edits of `text` with bytes of `alphabet`, if still UTF-8: the fast
/// readers' tests compare what they make of the result with serde's.
#[cfg(test)]
pub(crate) fn mangle(rng: &mut rand::rngs::StdRng, text: &str, alphabet: &[u8]) -> Option<String> {
    use rand::Rng;
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..rng.random_range(1..4) {
        let at = rng.random_range(0..=bytes.len());
        let byte = alphabet[rng.random_range(0..alphabet.len())];
        match rng.random_range(0..3) {
            0 if at < bytes.len() => drop(bytes.remove(at)),
            1 if at < bytes.len() => bytes[at] = byte,
            _ => bytes.insert(at, byte),
        }
    }
    String::from_utf8(bytes).ok()
}

/// JSON's own characters, for `mangle`'s edits.
#[cfg(test)]
pub(crate) const JSON_BYTES: &[u8] = b"{}[]\":,\\ -.0123456789eEnulltruefalsxu\n\t";

/// For the fast readers' tests: `n` random edits (`mangle`, with bytes of `alphabet`) of
/// bodies picked from `corpus`, each given to `read`, which checks a fast reader against
/// serde on it and says whether the fast reader answered; how many edits it answered.
#[cfg(test)]
pub(crate) fn mangled_bodies(
    corpus: &[&str],
    alphabet: &[u8],
    seed: u64,
    n: usize,
    mut read: impl FnMut(&str) -> bool,
) -> usize {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut read_fast = 0;
    for _ in 0..n {
        let pick = corpus[rng.random_range(0..corpus.len())];
        if let Some(body) = mangle(&mut rng, pick, alphabet) {
            read_fast += usize::from(read(&body));
        }
    }
    read_fast
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn a_plain_run_ends_where_the_byte_table_says() {
        // Bounded: 20,000 random strings of bytes JSON treats differently in a string.
        const BYTES: &[u8] = b"ab \"\\\x00\x1f\x20\x7f\x80\xff!#[]";
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..20_000 {
            let len = rng.random_range(0..40);
            let bytes: Vec<u8> = (0..len)
                .map(|_| BYTES[rng.random_range(0..BYTES.len())])
                .collect();
            let end = bytes.iter().position(|&b| STOPS[usize::from(b)]);
            let want = end.filter(|&e| matches!(bytes[e], b'"' | b'\\'));
            assert_eq!(plain_run(&bytes), want, "{bytes:?}");
        }
    }

    #[test]
    fn id_lists_in_any_spelling_read_as_serde_reads_them() {
        // Bounded: 2,000 lists of up to 12 ids, each spelt plainly or not (spaces, a leading
        // zero, a sign, a fraction, an id past u32), read by `ids` and counted by `id_count`
        // as serde reads them, or refused where serde refuses them.
        let mut rng = StdRng::seed_from_u64(12);
        let odd = [" ", "0", "-", ".0", "e1", "4294967296"];
        for _ in 0..2_000 {
            let n = rng.random_range(0..12);
            let mut text = String::from("[");
            for i in 0..n {
                if i > 0 {
                    text.push(',');
                }
                let id = rng.random_range(0..5_000_000u32).to_string();
                match rng.random_range(0..24) {
                    0 => text.push_str(odd[rng.random_range(0..odd.len())]),
                    1 => text.push(' '),
                    _ => {}
                }
                text.push_str(&id);
                if rng.random_range(0..24) == 0 {
                    text.push_str(odd[rng.random_range(0..odd.len())]);
                }
            }
            text.push(']');
            let serde = serde_json::from_str::<Vec<u32>>(&text).ok();
            let mut c = Cursor::new(&text);
            let ids = c.ids().filter(|_| c.end().is_some());
            assert_eq!(ids, serde, "{text}");
            let mut c = Cursor::new(&text);
            let count = c.id_count().filter(|_| c.end().is_some());
            assert_eq!(count, serde.as_ref().map(|v| v.len() as u64), "{text}");
        }
    }

    #[test]
    fn a_short_number_read_at_once_is_the_one_read_byte_by_byte() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let alphabet = b"0123456789012345678901234567890123456789,]} .e-/:\xff\xfa";
        for _ in 0..200_000 {
            let len = rng.random_range(0..14);
            let bytes: Vec<u8> = (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            assert_eq!(plain_uint(&bytes), long_uint(&bytes), "{bytes:?}");
        }
        for text in ["1,", "1234567]", "99999999", "0000001,", "4294967295,"] {
            assert_eq!(
                plain_uint(text.as_bytes()),
                long_uint(text.as_bytes()),
                "{text}"
            );
        }
        assert_eq!(plain_uint(b"1234567,xx"), Some((1_234_567, 7)));
        assert_eq!(plain_uint(b"07,xxxxxxx"), None);
    }

    #[test]
    fn integers_and_id_lists_read_as_serde_reads_them_or_not_at_all() {
        let u64s = [
            "0",
            "7",
            "10",
            "1234567890123456789",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999",
            "01",
            "-1",
            "",
            "1.5",
        ];
        for text in u64s {
            let fast = Cursor::new(text)
                .uint::<u64>()
                .filter(|_| !text.contains('.'));
            let serde = serde_json::from_str::<u64>(text).ok();
            if fast.is_some() {
                assert_eq!(fast, serde, "{text}");
            }
            assert_eq!(fast.is_some(), serde.is_some(), "{text}");
        }
        assert_eq!(Cursor::new("4294967296").uint::<u32>(), None);
        let lists = ["[]", "[ ]", "[1]", "[1, 22 ,333]", "[4294967295,0]"];
        for text in lists {
            let mut c = Cursor::new(text);
            let ids = c.ids().unwrap();
            assert_eq!(c.end(), Some(()));
            assert_eq!(
                ids,
                serde_json::from_str::<Vec<u32>>(text).unwrap(),
                "{text}"
            );
            assert!(
                ids.capacity() <= ids.len().max(1),
                "{text}: {}",
                ids.capacity()
            );
        }
        for text in ["[1,]", "[1", "[1 2]", "[4294967296]", "[-1]", "[1.0]"] {
            assert_eq!(Cursor::new(text).ids(), None, "{text}");
        }
    }
}
