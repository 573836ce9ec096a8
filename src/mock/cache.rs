//! The simulated prefix cache: an LRU over chained hashes of 16-token prompt blocks, as vLLM's
//! automatic prefix caching keeps it.
//!
//! Block `i` of a prompt is tokens `16i..16i+16`; its hash is `h_i = H(h_{i-1}, block_i)`, so a
//! block hash names the whole prefix up to its end. Only full blocks are cached and matched.
//! A request's hit is the run of leading blocks found, capped as vLLM caps it: at most
//! `len - 1` tokens, because the last prompt token is always computed again for its logits
//! (a 96-token prompt seen before hits 80, a 100-token one 96). After the prefill every full
//! block is inserted or refreshed; a request's blocks are refreshed last-to-first, so its
//! first block is the most recent and the tail goes first on eviction (vLLM frees blocks in
//! reverse order for the same reason). Capacity is in tokens, rounded down to whole blocks;
//! the map never holds more than that many blocks.

use std::collections::{BTreeMap, HashMap};

use super::vocab::mix;

/// Tokens per block (vLLM's default block size).
pub(crate) const BLOCK: usize = 16;

/// The chained hashes of the full blocks of `ids`.
pub(crate) fn block_hashes(ids: &[u32]) -> Vec<u64> {
    let mut h = 0x7072_6566_6978_0000_u64;
    ids.chunks_exact(BLOCK)
        .map(|block| {
            h = block.iter().fold(h, |h, id| mix(h, u64::from(*id)));
            h
        })
        .collect()
}

/// An LRU of block hashes.
pub(crate) struct PrefixCache {
    capacity: usize,
    /// Block hash -> its last-use stamp.
    stamps: HashMap<u64, u64>,
    /// Last-use stamp -> block hash: the eviction order, oldest first.
    order: BTreeMap<u64, u64>,
    clock: u64,
}

impl PrefixCache {
    pub fn new(capacity_tokens: u64) -> PrefixCache {
        PrefixCache {
            capacity: usize::try_from(capacity_tokens / BLOCK as u64).unwrap_or(usize::MAX),
            stamps: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }

    /// Tokens of the longest cached prefix of a prompt of `len` tokens with these block hashes.
    pub fn hit(&self, hashes: &[u64], len: usize) -> usize {
        let max_blocks = len.saturating_sub(1) / BLOCK;
        let blocks = hashes
            .iter()
            .take(max_blocks)
            .take_while(|h| self.stamps.contains_key(h))
            .count();
        blocks * BLOCK
    }

    /// Inserts or refreshes every block, last to first, evicting the least recently used.
    pub fn insert(&mut self, hashes: &[u64]) {
        if self.capacity == 0 {
            return;
        }
        for h in hashes.iter().rev() {
            self.clock += 1;
            if let Some(old) = self.stamps.insert(*h, self.clock) {
                self.order.remove(&old);
            }
            self.order.insert(self.clock, *h);
        }
        while self.stamps.len() > self.capacity {
            let Some((_, h)) = self.order.pop_first() else {
                break;
            };
            self.stamps.remove(&h);
        }
    }

    /// Drops every block (SGLang's `/flush_cache`).
    pub fn clear(&mut self) {
        self.stamps.clear();
        self.order.clear();
    }

    /// Blocks held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.stamps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(range: std::ops::Range<u32>) -> Vec<u32> {
        range.collect()
    }

    #[test]
    fn chained_hashes_name_the_whole_prefix() {
        let a = block_hashes(&ids(0..40));
        assert_eq!(a.len(), 2, "only full blocks");
        let mut other = ids(0..40);
        other[0] = 999;
        let b = block_hashes(&other);
        // Same second block, different first: the chain makes the second hash differ too.
        assert_ne!(a[1], b[1]);
        assert_eq!(block_hashes(&ids(0..32)), a);
    }

    #[test]
    fn hit_is_leading_full_blocks_short_of_the_last_token() {
        let mut cache = PrefixCache::new(1024);
        let p = block_hashes(&ids(0..100));
        assert_eq!(cache.hit(&p, 100), 0);
        cache.insert(&p);
        assert_eq!(cache.hit(&p, 100), 96);
        let whole = block_hashes(&ids(0..96));
        assert_eq!(
            cache.hit(&whole, 96),
            80,
            "the last token is computed again"
        );
        let longer = block_hashes(&ids(0..200));
        assert_eq!(cache.hit(&longer, 200), 96);
    }

    #[test]
    fn evicts_least_recently_used_tail_first() {
        let mut cache = PrefixCache::new(64);
        let a = block_hashes(&ids(0..64));
        cache.insert(&a);
        let b = block_hashes(&ids(1000..1032));
        cache.insert(&b);
        assert_eq!(cache.len(), 4);
        // a's two tail blocks went; its head survives, so a still hits its first 32 tokens.
        assert_eq!(cache.hit(&a, 65), 32);
        assert_eq!(cache.hit(&b, 33), 32);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut cache = PrefixCache::new(15);
        let a = block_hashes(&ids(0..64));
        cache.insert(&a);
        assert_eq!(cache.hit(&a, 64), 0);
        assert_eq!(cache.len(), 0);
    }
}
