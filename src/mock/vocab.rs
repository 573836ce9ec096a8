//! Deterministic vocabulary, hashing and the word tokenizer the mock pretends to have.
//!
//! A prompt token is a whitespace-separated word. Words of the output vocabulary keep their
//! vocabulary id (`FIRST_WORD_ID + index`); any other word hashes to an id above the vocabulary,
//! so the same word always gets the same id. Ids below `FIRST_WORD_ID` are special tokens.

use std::collections::HashMap;
use std::sync::LazyLock;

/// End-of-sequence token id (special: counted, never rendered as text).
pub const EOS_ID: u32 = 2;
/// Chat template tokens: `<|im_start|>`, the role, `<|im_end|>`.
pub const IM_START_ID: u32 = 3;
pub const IM_END_ID: u32 = 4;
/// Id of vocabulary word 0; a multiple of `VOCAB_SIZE`, so `id % VOCAB_SIZE` is the word index.
pub const FIRST_WORD_ID: u32 = 1000;
pub const VOCAB_SIZE: u32 = 250;
/// Words outside the vocabulary hash into this many ids above it.
const UNKNOWN_ID_SPACE: u64 = 100_000;

const WORDS: &str = "
    the of and to in is was for on that with as by at from his her they we you all one two
    three new old good great small large long short high low big time year day week night
    morning world life hand part place case point group number fact water room mother father
    home house city road river tree stone light dark red blue green white black gold silver
    iron wood paper glass book page word line story song voice sound music color shape form
    field game team ship boat car train plane bird fish horse dog cat bear wolf fox sun moon
    star sky cloud rain snow wind storm fire earth sea lake hill mountain valley forest garden
    flower leaf seed root bread milk salt sugar rice bean apple pear plum grape lemon honey tea
    soup cake door window wall floor roof table chair bed lamp clock key box bag cup plate
    knife spoon fork bottle coat shirt shoe hat ring bell drum flute harp pen ink map coin card
    gift king queen prince knight farmer doctor teacher child friend people person run walk
    swim jump fly sing read write speak listen think know make take give find keep hold turn
    move play work rest sleep wake build break open close begin end start stop carry bring send
    show tell ask call help learn quick slow warm cold soft hard bright calm quiet loud young
    early late near far deep wide thin thick clean fresh sweet sharp
";

struct Vocab {
    /// Output token texts, each with its leading space: " word".
    pieces: Vec<String>,
    index: HashMap<&'static str, u32>,
}

static VOCAB: LazyLock<Vocab> = LazyLock::new(|| {
    let words: Vec<&'static str> = WORDS.split_ascii_whitespace().collect();
    let index = words
        .iter()
        .enumerate()
        .map(|(i, w)| (*w, i as u32))
        .collect();
    let pieces = words.iter().map(|w| format!(" {w}")).collect();
    Vocab { pieces, index }
});

/// Text of output vocabulary word `index` (taken modulo the vocabulary), with its leading space.
pub fn piece(index: u32) -> &'static str {
    let vocab: &'static Vocab = &VOCAB;
    &vocab.pieces[(index % VOCAB_SIZE) as usize]
}

/// The text a token id decodes to: special ids decode to nothing, every other id to a vocabulary
/// word (ids of unknown prompt words therefore decode to some vocabulary word: lossy, on purpose).
pub fn decode(id: u32) -> &'static str {
    if id < FIRST_WORD_ID {
        ""
    } else {
        piece(id)
    }
}

/// The token id of one prompt word.
pub fn word_id(word: &str) -> u32 {
    match VOCAB.index.get(word) {
        Some(i) => FIRST_WORD_ID + i,
        None => FIRST_WORD_ID + VOCAB_SIZE + (fnv1a(word.as_bytes()) % UNKNOWN_ID_SPACE) as u32,
    }
}

/// Token ids of a text: one per whitespace-separated word.
pub fn encode(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.split_whitespace().map(word_id)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// SplitMix64 finaliser: a cheap, well-mixed 64-bit hash step.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Hash of two values; order matters.
pub fn mix(a: u64, b: u64) -> u64 {
    splitmix(a ^ splitmix(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_is_distinct_and_sized() {
        assert_eq!(VOCAB.pieces.len() as u32, VOCAB_SIZE);
        assert_eq!(VOCAB.index.len() as u32, VOCAB_SIZE);
        assert_eq!(FIRST_WORD_ID % VOCAB_SIZE, 0);
    }

    #[test]
    fn vocabulary_words_round_trip() {
        let id = word_id("river");
        assert!((FIRST_WORD_ID..FIRST_WORD_ID + VOCAB_SIZE).contains(&id));
        assert_eq!(decode(id), " river");
        assert_eq!(word_id("zyzzyva"), word_id("zyzzyva"));
        assert!(word_id("zyzzyva") >= FIRST_WORD_ID + VOCAB_SIZE);
        assert_eq!(decode(EOS_ID), "");
    }
}
