//! `arrays="union"`: the structural hash and the index that keep dedup linear.
//!
//! Comparing every patch value with every value already present is quadratic in deep equality
//! checks; instead each value gets a 64-bit structural hash consistent with JSON equality (equal
//! values hash equally: objects ignore key order, `1` and `1.0` hash alike, booleans are tagged
//! apart from numbers) and only values in the same bucket are compared. Tiny arrays skip the
//! hashing, where a few direct comparisons are cheaper than building an index.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Below this many values in total, dedup compares pairwise instead of hashing.
pub const PAIRWISE_LIMIT: usize = 16;

pub const NULL_HASH: u64 = 0x6e75_6c6c_0000_0001;
pub const TRUE_HASH: u64 = 0x7472_7565_0000_0002;
pub const FALSE_HASH: u64 = 0x6661_6c73_0000_0003;
const NUMBER_TAG: u64 = 0x6e75_6d00_0000_0004;
const STRING_TAG: u64 = 0x7374_7200_0000_0005;
const ARRAY_TAG: u64 = 0x6172_7200_0000_0006;
const OBJECT_TAG: u64 = 0x6f62_6a00_0000_0007;

/// splitmix64's finaliser: cheap and spreads every input bit over the output.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hash of a number given a hash of its value that is already equal for equal numbers.
pub fn number_hash(value_hash: u64) -> u64 {
    mix(NUMBER_TAG ^ value_hash)
}

pub fn string_hash(text_hash: u64) -> u64 {
    mix(STRING_TAG ^ text_hash)
}

/// Order-sensitive combination for arrays.
#[derive(Debug)]
pub struct ArrayHasher(u64);

impl Default for ArrayHasher {
    fn default() -> Self {
        Self(ARRAY_TAG)
    }
}

impl ArrayHasher {
    pub fn add(&mut self, item: u64) {
        self.0 = mix(self.0.rotate_left(5) ^ item);
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// Order-insensitive combination for objects: a wrapping sum of mixed (key, value) pairs.
#[derive(Debug, Default)]
pub struct ObjectHasher {
    sum: u64,
    len: u64,
}

impl ObjectHasher {
    pub fn add(&mut self, key_hash: u64, value_hash: u64) {
        self.sum = self
            .sum
            .wrapping_add(mix(key_hash ^ value_hash.rotate_left(29)));
        self.len += 1;
    }

    pub fn finish(&self) -> u64 {
        mix(OBJECT_TAG ^ self.sum ^ self.len.rotate_left(47))
    }
}

/// The hashes are already mixed, so the map uses them as they are.
#[derive(Default)]
struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The values of a union result so far, indexed by structural hash. Values are referred to by
/// their position in the caller's result vector; colliding positions are chained.
#[derive(Default)]
pub struct UnionIndex {
    heads: HashMap<u64, usize, BuildHasherDefault<IdentityHasher>>,
    next: Vec<usize>,
}

const END: usize = usize::MAX;

impl UnionIndex {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            heads: HashMap::with_capacity_and_hasher(capacity, BuildHasherDefault::default()),
            next: Vec::with_capacity(capacity),
        }
    }

    /// Records the value at `position` (the next position: positions are dense from 0).
    pub fn insert(&mut self, hash: u64, position: usize) {
        debug_assert_eq!(position, self.next.len());
        let previous = self.heads.insert(hash, position).unwrap_or(END);
        self.next.push(previous);
    }

    /// Whether some recorded value with this hash is equal, according to `equal(position)`.
    pub fn contains<E>(
        &self,
        hash: u64,
        mut equal: impl FnMut(usize) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let mut cursor = self.heads.get(&hash).copied().unwrap_or(END);
        while cursor != END {
            if equal(cursor)? {
                return Ok(true);
            }
            cursor = self.next[cursor];
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_hash_ignores_order_but_not_pairing() {
        let mut a = ObjectHasher::default();
        a.add(1, 10);
        a.add(2, 20);
        let mut b = ObjectHasher::default();
        b.add(2, 20);
        b.add(1, 10);
        let mut c = ObjectHasher::default();
        c.add(1, 20);
        c.add(2, 10);
        assert_eq!(a.finish(), b.finish());
        assert_ne!(a.finish(), c.finish());
    }

    #[test]
    fn array_hash_depends_on_order() {
        let mut a = ArrayHasher::default();
        a.add(1);
        a.add(2);
        let mut b = ArrayHasher::default();
        b.add(2);
        b.add(1);
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn index_chains_collisions_and_asks_for_equality() {
        let values = ["a", "b", "c"];
        let mut index = UnionIndex::with_capacity(3);
        // Every value in one bucket: a forced collision.
        for (i, _) in values.iter().enumerate() {
            index.insert(7, i);
        }
        let hit: Result<bool, ()> = index.contains(7, |i| Ok(values[i] == "a"));
        assert!(hit.unwrap());
        let miss: Result<bool, ()> = index.contains(7, |i| Ok(values[i] == "z"));
        assert!(!miss.unwrap());
        let other: Result<bool, ()> = index.contains(8, |_| Ok(true));
        assert!(!other.unwrap());
    }
}
