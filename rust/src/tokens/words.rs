//! Words the vocabulary does not hold: the one sign of text the features cannot see.
//!
//! Pronounceable nonsense (`"bocusi da fedepo"`), random letters of one script grouped as
//! words, one unknown word repeated (`"cduag cduag"`): their features are those of ordinary
//! words, which the model prices at a token or so each, but a word the vocabulary does not
//! hold takes at least two tokens, and often four or more. Only the vocabulary can tell them
//! apart, so a sample of a chunk's words is looked up in it.

use std::sync::LazyLock;

use super::features::{word_masks, Unit, WordMasks};
use super::models::Encoding;

/// One word in this many is looked up: the share of unknown words is what matters, which a
/// sample tells, and looking up every fourth word already makes the estimate of English prose
/// about twice as slow (a third slower on the benchmark's mixed text).
pub const WORD_SAMPLE: usize = 4;

/// Unknown words are a sign the model cannot bound a chunk once they would take more than this
/// share of its estimate: each at least 2 tokens, or half a token per Latin letter with a
/// diacritic (U+00C0..=U+024F) if more, every sampled one standing for [`WORD_SAMPLE`]. An
/// ordinary word holds one or two such letters; a word spelt from random ones takes about a
/// token for each. Ordinary prose, code and CJK text rarely have that many unknown words: most
/// of their words are one token each.
pub const UNKNOWN_SHARE: f64 = 0.5;

/// A chunk of fewer code points than this is counted exactly once its unknown words would
/// take half of [`UNKNOWN_SHARE`]: a few words are too few to judge by a share, and such a
/// chunk costs little to count.
pub const SHORT_CHARS: usize = 128;

/// The share of a chunk of `chars` code points' value its unknown words may take.
pub fn unknown_share(chars: usize) -> f64 {
    if chars < SHORT_CHARS {
        UNKNOWN_SHARE / 2.0
    } else {
        UNKNOWN_SHARE
    }
}

/// Letters of the words looked up: ASCII letters, 2-byte UTF-8 characters (Latin with
/// diacritics, Greek, Cyrillic, Armenian, Hebrew, Arabic, Syriac...) and kana.
#[inline]
fn is_word_char(c: u32) -> bool {
    (c | 0x20).wrapping_sub(u32::from(b'a')) < 26
        || c.wrapping_sub(0x80) < 0x780
        || c.wrapping_sub(0x3040) < 0xC0
}

/// Words of at most this many ASCII characters are looked up from one 16-byte read (see
/// `WordTokens::holds_short_ascii`): with the space before them, they fit in it.
const SHORT_WORD: usize = 15;

/// `units[..16]` truncated to bytes (the first in the lowest byte), and the mask of those
/// that are not ASCII (bit `k` for `units[k]`).
#[inline]
fn ascii16<U: Unit>(units: &[U]) -> (u128, u32) {
    // For UTF-8 and UCS-4 units alike the copy is a read of the 16 units.
    let values: [u32; 16] = std::array::from_fn(|k| units[k].value());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of the x86_64 baseline: every x86_64 CPU has it.
    return unsafe { sse2_ascii16(&values) };
    #[cfg(not(target_arch = "x86_64"))]
    return ascii16_scalar(&values);
}

/// [`ascii16`] one unit at a time.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn ascii16_scalar(values: &[u32; 16]) -> (u128, u32) {
    let (mut bytes, mut high) = (0u128, 0u32);
    for (k, &v) in values.iter().enumerate() {
        bytes |= u128::from(v as u8) << (8 * k);
        high |= u32::from(v >= 0x80) << k;
    }
    (bytes, high)
}

/// [`ascii16`] with SSE2: the low bytes packed with two saturating packs (exact, once the
/// rest of each unit is cleared), the non-ASCII units by a biased signed comparison.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn sse2_ascii16(values: &[u32; 16]) -> (u128, u32) {
    use std::arch::x86_64::*;
    // SAFETY: k < 4, so the 4 values read lie inside `values`; the load has no alignment
    // requirement.
    let load = |k: usize| unsafe { _mm_loadu_si128(values.as_ptr().add(4 * k).cast()) };
    let (a, b, c, d) = (load(0), load(1), load(2), load(3));
    let low = _mm_set1_epi32(0xFF);
    let bytes = _mm_packus_epi16(
        _mm_packs_epi32(_mm_and_si128(a, low), _mm_and_si128(b, low)),
        _mm_packs_epi32(_mm_and_si128(c, low), _mm_and_si128(d, low)),
    );
    let bias = _mm_set1_epi32(i32::MIN);
    let ascii_max = _mm_set1_epi32((0x7F ^ 0x8000_0000u32) as i32);
    let high = |v: __m128i| {
        _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(
            _mm_xor_si128(v, bias),
            ascii_max,
        ))) as u32
    };
    let lo = _mm_cvtsi128_si64(bytes) as u64;
    let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(bytes, bytes)) as u64;
    (
        u128::from(hi) << 64 | u128::from(lo),
        high(a) | high(b) << 4 | high(c) << 8 | high(d) << 12,
    )
}

/// Room for the longest word token (33 bytes in o200k, 36 in cl100k) and then some.
const KEY_BYTES: usize = 64;

/// The vocabulary's tokens that look like words (a word's characters, after a space or a tab
/// or not), as a set of 32-bit fingerprints: the only tokens a word can be, in one array small
/// enough to stay in a core's cache (1 MB for o200k's 146,209 such tokens), which a lookup
/// reads once. The tokenizer's own set takes three reads, each likely a cache miss.
struct WordTokens {
    /// Open addressing, linear probing, indexed by a hash's low bits, holding its high 32
    /// bits; 0 is an empty slot (no fingerprint is 0).
    slots: Vec<u32>,
    longest: usize,
}

impl WordTokens {
    fn new(tokenizer: &bpe_openai::Tokenizer) -> Self {
        let bpe = &tokenizer.bpe;
        let words: Vec<&[u8]> = (0..bpe.num_tokens() as u32)
            .map(|id| bpe.token_bytes(id))
            .filter(|bytes| looks_like_a_word(bytes))
            .collect();
        let mut slots = vec![0u32; (words.len() * 3 / 2).next_power_of_two().max(2)];
        let mask = slots.len() - 1;
        for bytes in &words {
            let (mut i, print) = slot(hash(bytes), mask);
            while slots[i] != 0 && slots[i] != print {
                i = (i + 1) & mask;
            }
            slots[i] = print;
        }
        let longest = words.iter().map(|w| w.len()).max().unwrap_or(0);
        // A key is written while it is at most this long, plus one character.
        assert!(longest + 3 < KEY_BYTES, "a word token of {longest} bytes");
        Self { slots, longest }
    }

    /// Whether the word `units[start..=end]`, with the space or tab before it, is one of the
    /// tokens. A word glued to ASCII punctuation is also taken for one when it is a token after
    /// a space: a word of the language the vocabulary spells in two tokens without its space
    /// ("cryptography" after a slash) is not random letters. Its UTF-8 bytes are written into
    /// a buffer one by one (a copy call per character costs more than the lookup); one longer
    /// than every token is not one.
    #[inline]
    fn holds<U: Unit>(&self, units: &[U], start: usize, end: usize) -> bool {
        if let Some(held) = self.holds_short_ascii(units, start, end) {
            return held;
        }
        self.holds_spelt(units, start, end)
    }

    /// [`Self::holds`] of an ASCII word of at most [`SHORT_WORD`] units followed by enough
    /// text to read 16 units from its start: the units are read as one 16-byte value and
    /// hashed in registers, without a loop over the word's characters, whose exit (at another
    /// length each word) the branch predictor mostly misses. `None` for other words.
    #[inline]
    fn holds_short_ascii<U: Unit>(&self, units: &[U], start: usize, end: usize) -> Option<bool> {
        let len = end + 1 - start;
        if len > SHORT_WORD || units.len() - start < 16 {
            return None;
        }
        let (bytes, high) = ascii16(&units[start..start + 16]);
        if high & ((1 << len) - 1) != 0 {
            return None;
        }
        let word = bytes & ((1u128 << (8 * len)) - 1);
        let before = if start > 0 {
            units[start - 1].value()
        } else {
            0x0A
        };
        Some(match before {
            0x20 | 0x09 => self.contains_short(word << 8 | u128::from(before), len + 1),
            0x21..=0x7E if !(before as u8).is_ascii_alphanumeric() => {
                self.contains_short(word, len) || self.contains_short(word << 8 | 0x20, len + 1)
            }
            _ => self.contains_short(word, len),
        })
    }

    /// [`Self::holds`] with the word's UTF-8 bytes written into a buffer.
    #[inline]
    fn holds_spelt<U: Unit>(&self, units: &[U], start: usize, end: usize) -> bool {
        let mut key = [0u8; KEY_BYTES];
        // The word is written from key[1]; key[0] holds the space or tab before it, if any.
        let before = if start > 0 {
            units[start - 1].value()
        } else {
            0x0A
        };
        let mut k = 1;
        for unit in &units[start..=end] {
            if k > self.longest + 1 {
                return false;
            }
            let v = unit.value();
            if size_of::<U>() == 1 || v < 0x80 {
                key[k] = v as u8;
                k += 1;
            } else if v < 0x800 {
                key[k] = 0xC0 | (v >> 6) as u8;
                key[k + 1] = 0x80 | (v & 0x3F) as u8;
                k += 2;
            } else {
                key[k] = 0xE0 | (v >> 12) as u8;
                key[k + 1] = 0x80 | (v >> 6 & 0x3F) as u8;
                key[k + 2] = 0x80 | (v & 0x3F) as u8;
                k += 3;
            }
        }
        match before {
            0x20 | 0x09 => {
                key[0] = before as u8;
                self.contains(&key[..k])
            }
            0x21..=0x7E if !(before as u8).is_ascii_alphanumeric() => {
                key[0] = b' ';
                self.contains(&key[1..k]) || self.contains(&key[..k])
            }
            _ => self.contains(&key[1..k]),
        }
    }

    /// Whether `bytes` are one of the tokens. A word that is not is taken for one when its
    /// fingerprint equals one met on the way, a chance of about one in a billion.
    #[inline]
    fn contains(&self, bytes: &[u8]) -> bool {
        if bytes.len() > self.longest {
            return false;
        }
        self.contains_hash(hash(bytes))
    }

    /// [`Self::contains`] of the `len` (1 to 16) bytes of `bytes`, the first in its lowest
    /// byte, every byte above them 0: [`hash`] of them, from the two words it reads.
    #[inline]
    fn contains_short(&self, bytes: u128, len: usize) -> bool {
        let h = mix(len as u64, bytes as u64);
        let h = if len > 8 {
            mix(h, (bytes >> 64) as u64)
        } else {
            h
        };
        self.contains_hash(finish(h))
    }

    /// Whether a token's [`hash`] is `h`.
    #[inline]
    fn contains_hash(&self, h: u64) -> bool {
        let mask = self.slots.len() - 1;
        let (mut i, print) = slot(h, mask);
        loop {
            match self.slots[i] {
                0 => return false,
                found if found == print => return true,
                _ => i = (i + 1) & mask,
            }
        }
    }
}

/// The slot a hash starts probing at and the fingerprint stored for it.
#[inline]
fn slot(h: u64, mask: usize) -> (usize, u32) {
    (h as usize & mask, ((h >> 32) as u32).max(1))
}

/// Whether a token's bytes are one of the keys [`sampled_unknown_words`] looks up.
fn looks_like_a_word(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let letters = text.strip_prefix([' ', '\t']).unwrap_or(text);
    !letters.is_empty() && letters.chars().all(|c| is_word_char(u32::from(c)))
}

/// FxHash over 8 bytes at a time, finished by murmur3's mixer, so that both the low bits (the
/// slot) and the high bits (the fingerprint) depend on every byte.
#[inline]
fn hash(bytes: &[u8]) -> u64 {
    let mut h = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        h = mix(h, u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        // Byte by byte: a copy into a buffer read back as a word stalls on the store.
        let word = rest
            .iter()
            .rev()
            .fold(0u64, |word, &byte| word << 8 | u64::from(byte));
        h = mix(h, word);
    }
    finish(h)
}

/// One step of [`hash`]: the next 8 bytes (or the last ones, zero-padded), little-endian.
#[inline]
fn mix(h: u64, word: u64) -> u64 {
    (h.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

/// The last step of [`hash`].
#[inline]
fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

// Built lazily, once per encoding, from the tokenizers the exact counter loads.
static O200K_WORDS: LazyLock<WordTokens> =
    LazyLock::new(|| WordTokens::new(bpe_openai::o200k_base()));
static CL100K_WORDS: LazyLock<WordTokens> =
    LazyLock::new(|| WordTokens::new(bpe_openai::cl100k_base()));

fn word_tokens(encoding: Encoding) -> &'static WordTokens {
    match encoding {
        Encoding::O200kBase => &O200K_WORDS,
        Encoding::Cl100kBase => &CL100K_WORDS,
    }
}

/// Symbols and punctuation past the ASCII range that end a word's piece as an ASCII
/// character does: U+2000..=U+2FFF (general punctuation, arrows, box drawing, dingbats) and
/// U+1F000..=U+1FFFF (emoji). Other characters may be letters that continue the piece.
#[inline]
fn ends_a_word(c: u32) -> bool {
    c.wrapping_sub(0x2000) < 0x1000 || c.wrapping_sub(0x1F000) < 0x1000
}

/// Word characters past ASCII: 2-byte UTF-8 characters and kana (see [`is_word_char`]).
#[inline]
fn is_non_ascii_word_char(c: u32) -> bool {
    c.wrapping_sub(0x80) < 0x780 || c.wrapping_sub(0x3040) < 0xC0
}

/// `(word characters past ASCII, characters that end a word)` of up to 64 code points, as
/// bit masks (bit `k` for `units[k]`).
fn code_point_classes_scalar<U: Unit>(units: &[U]) -> (u64, u64) {
    let (mut mask, mut enders) = (0u64, 0u64);
    for (k, unit) in units.iter().take(64).enumerate() {
        mask |= u64::from(is_non_ascii_word_char(unit.value())) << k;
        enders |= u64::from(ends_a_word(unit.value())) << k;
    }
    (mask, enders)
}

/// [`code_point_classes_scalar`] of a whole block of code points. Where many of a block's
/// code points are past ASCII, SSE2 (part of the x86_64 baseline) compares four at a time,
/// where the scalar loop takes about twenty instructions for each.
#[inline]
fn code_point_classes<U: Unit>(block: &[U; 64]) -> (u64, u64) {
    #[cfg(target_arch = "x86_64")]
    {
        // For UCS-4 units the copy is the block itself, which the compiler reads in place.
        let values: [u32; 64] = std::array::from_fn(|k| block[k].value());
        // SAFETY: SSE2 is part of the x86_64 baseline: every x86_64 CPU has it.
        unsafe { sse2_code_point_classes(&values) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    code_point_classes_scalar(block)
}

/// [`code_point_classes_scalar`] with SSE2: for each range test, one biased signed
/// comparison of four code points (`x - lo <u n` is `(x - lo) ^ MIN <s n ^ MIN`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn sse2_code_point_classes(block: &[u32; 64]) -> (u64, u64) {
    use std::arch::x86_64::*;
    let bias = _mm_set1_epi32(i32::MIN);
    let below = |v: __m128i, lo: u32, n: u32| {
        _mm_cmplt_epi32(
            _mm_xor_si128(_mm_sub_epi32(v, _mm_set1_epi32(lo as i32)), bias),
            _mm_set1_epi32((n ^ 0x8000_0000) as i32),
        )
    };
    let (mut mask, mut enders) = (0u64, 0u64);
    for k in 0..16 {
        // SAFETY: k < 16, so the 4 code points read lie inside `block`; the load has no
        // alignment requirement.
        let v = unsafe { _mm_loadu_si128(block.as_ptr().add(4 * k).cast()) };
        let word = _mm_or_si128(below(v, 0x80, 0x780), below(v, 0x3040, 0xC0));
        let ends = _mm_or_si128(below(v, 0x2000, 0x1000), below(v, 0x1F000, 0x1000));
        mask |= (_mm_movemask_ps(_mm_castsi128_ps(word)) as u64) << (4 * k);
        enders |= (_mm_movemask_ps(_mm_castsi128_ps(ends)) as u64) << (4 * k);
    }
    (mask, enders)
}

/// Marks the non-ASCII word characters of the 64-unit block at `start`, whose non-ASCII
/// units are `non_ascii`, in `word` (one bit per unit; a UTF-8 character's bits may run into
/// the next block), and clears in `blocking` the first unit of the characters that end a word
/// (see [`ends_a_word`]). Branch-free per unit where many are non-ASCII: their classes change
/// every few units, which a branch per unit mispredicts.
#[inline]
fn mark_non_ascii_words<U: Unit>(
    units: &[U],
    start: usize,
    non_ascii: u64,
    word: &mut [u64],
    blocking: &mut [u64],
) {
    let end = (start + 64).min(units.len());
    let b = start / 64;
    if size_of::<U>() != 1 {
        let (mut mask, mut enders) = (0u64, 0u64);
        if non_ascii.count_ones() <= 8 {
            // A few accented letters or symbols among ASCII text: only they are read.
            let mut rest = non_ascii;
            while rest != 0 {
                let k = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                let v = units[start + k].value();
                mask |= u64::from(is_non_ascii_word_char(v)) << k;
                enders |= u64::from(ends_a_word(v)) << k;
            }
        } else {
            (mask, enders) = match <&[U; 64]>::try_from(&units[start..end]) {
                Ok(block) => code_point_classes(block),
                Err(_) => code_point_classes_scalar(&units[start..end]),
            };
        }
        word[b] |= mask;
        blocking[b] &= !enders;
        return;
    }
    // UTF-8: a 2-byte character starts with 0xC2..=0xDF; kana, U+3040..=U+30FF, are
    // E3 81 80..E3 83 BF; U+2000..=U+2FFF start with 0xE2, U+1F000..=U+1FFFF with F0 9F.
    let (mut two, mut kana, mut enders) = (0u64, 0u64, 0u64);
    for k in 0..end - start {
        let v = units[start + k].value();
        let next = units.get(start + k + 1).map_or(0, |u| u.value());
        let next2 = units.get(start + k + 2).map_or(0, |u| u.value());
        two |= u64::from(v.wrapping_sub(0xC2) < 0x1E) << k;
        let is_kana =
            v == 0xE3 && ((next == 0x81 && next2 >= 0x80) || next == 0x82 || next == 0x83);
        kana |= u64::from(is_kana) << k;
        enders |= u64::from(v == 0xE2 || (v == 0xF0 && next == 0x9F)) << k;
    }
    word[b] |= two | two << 1 | kana | kana << 1 | kana << 2;
    word[b + 1] |= two >> 63 | kana >> 62 | kana >> 63;
    blocking[b] &= !enders;
}

/// What the sampled words of `units` (one chunk) that `encoding`'s vocabulary does not hold
/// take at least, in half tokens: 4 for each, or its letters with diacritics if more (see
/// [`UNKNOWN_SHARE`]): of the words after whitespace, and (with `glued`, else 0) of the words
/// after punctuation, each sampled on its own.
///
/// A word is a maximal run of word characters after a space, a tab, a line break or the
/// chunk's start, and before an ASCII character or a symbol that ends a word (see
/// [`ends_a_word`]); with the space or tab it follows, it is a
/// piece of the pre-tokeniser (or several, which take at least two tokens too), so a word that
/// is not a token takes at least two. When `glued`, words after printable ASCII punctuation
/// count too, looked up without it: random letters glued by punctuation (`"àà÷.à÷ààà.à"`) are
/// words no space sets apart. That is only asked for where such words carry a share of the
/// value (see `glued_words` in the estimate): code and markup glue many known words to
/// punctuation, and each lookup costs time. Words glued to digits or other characters are
/// skipped. Every [`WORD_SAMPLE`]-th word is looked up, counting from the chunk's first.
pub fn sampled_unknown_words<U: Unit>(
    units: &[U],
    encoding: Encoding,
    glued: bool,
) -> (usize, usize) {
    sampled_unknown_words_in(units, &word_masks(units), encoding, glued)
}

/// Texts of fewer blocks of 64 units than this have their word masks on the stack: every
/// chunk of the estimate in UCS-4 (under 1.5 times 1024 units) and in mostly ASCII UTF-8.
const STACK_BLOCKS: usize = 32;

/// [`sampled_unknown_words`] given the [`WordMasks`] of `units`' blocks (which the feature
/// pass records): a scan that branches on every character costs as much as the whole pass.
pub fn sampled_unknown_words_in<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    encoding: Encoding,
    glued: bool,
) -> (usize, usize) {
    if units.is_empty() {
        return (0, 0);
    }
    let blocks = masks.len();
    // The word characters, then the non-ASCII units a word may not end before: on the stack
    // for the blocks of a chunk of UCS-4 or mostly ASCII text, else one allocation.
    let mut stack = [0u64; 2 * STACK_BLOCKS];
    let mut heap = Vec::new();
    let masks_of_words: &mut [u64] = if blocks < STACK_BLOCKS {
        &mut stack[..2 * (blocks + 1)]
    } else {
        heap.resize(2 * (blocks + 1), 0);
        &mut heap
    };
    let (word, blocking) = masks_of_words.split_at_mut(blocks + 1);
    for (b, m) in masks.iter().enumerate() {
        (word[b], blocking[b]) = (m.letters, m.non_ascii);
    }
    for (b, m) in masks.iter().enumerate() {
        if m.non_ascii != 0 {
            mark_non_ascii_words(units, 64 * b, m.non_ascii, word, blocking);
        }
    }
    let (word, blocking) = (&*word, &*blocking);
    let word_tokens = word_tokens(encoding);
    let spaced = sample_words(units, masks, word, blocking, word_tokens, false);
    let glued = if glued {
        sample_words(units, masks, word, blocking, word_tokens, true)
    } else {
        0
    };
    (spaced, glued)
}

/// What the sampled words of `units` that `word_tokens` does not hold take, in half tokens:
/// the words after a space, a tab, a line break or the chunk's start, or (`after_punctuation`)
/// the words after printable ASCII punctuation, each kind sampled on its own (so that looking
/// up glued words leaves the sample of the others as it was). `word` marks the word
/// characters, `blocking` the non-ASCII units a word may not end before.
fn sample_words<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    word: &[u64],
    blocking: &[u64],
    word_tokens: &WordTokens,
    after_punctuation: bool,
) -> usize {
    let n = units.len();
    // Run by run with bit operations rather than unit by unit: a branch per word costs about
    // as much as the whole feature pass. A word is a run of `word` bits; its start must follow
    // a separator (the chunk's start counts as a line break), the unit after its end must be
    // ASCII or end a word. Runs with a bad start are cleared by adding their start bit, which
    // carries through the run (and out of the block, into the run's next part).
    let (mut unknown, mut words) = (0, 0usize);
    let (mut word_before, mut carry) = (0, false);
    let mut separator_before = u64::from(!after_punctuation);
    for (b, m) in masks.iter().enumerate() {
        let w = word[b];
        let separators = if after_punctuation {
            m.punctuation
        } else {
            m.separators
        };
        let starts = w & !((w << 1) | word_before);
        let bad_starts = starts & !((separators << 1) | separator_before);
        let (sum, c1) = w.overflowing_add(bad_starts);
        let (sum, c2) = sum.overflowing_add(u64::from(carry));
        carry = c1 || c2;
        let kept = w & sum;
        let next_word = word[b + 1] & 1;
        let next_blocking = blocking[b + 1] & 1;
        let ends = kept & !((w >> 1) | (next_word << 63));
        // The unit after the end exists and is ASCII or ends a word.
        let followed = match n - 64 * b {
            left if left > 64 => u64::MAX,
            left => (1u64 << (left - 1)) - 1,
        };
        let mut valid = ends & !((blocking[b] >> 1) | (next_blocking << 63)) & followed;
        (word_before, separator_before) = (w >> 63, separators >> 63);
        // The valid words of this block are numbers `words..words + count`; every
        // WORD_SAMPLE-th one from the chunk's first is looked up.
        let count = valid.count_ones() as usize;
        let (mut cleared, mut next) = (0, (WORD_SAMPLE - words % WORD_SAMPLE) % WORD_SAMPLE);
        words += count;
        while next < count {
            for _ in cleared..next {
                valid &= valid - 1;
            }
            cleared = next;
            next += WORD_SAMPLE;
            let end = 64 * b + valid.trailing_zeros() as usize;
            let start = run_start(word, end);
            if !word_tokens.holds(units, start, end) {
                unknown += accented_letters(&units[start..=end]).max(4);
            }
        }
    }
    unknown
}

/// How many of the characters of `units` are Latin letters with diacritics, U+00C0..=U+024F.
fn accented_letters<U: Unit>(units: &[U]) -> usize {
    let (mut count, mut i) = (0, 0);
    while i < units.len() {
        let (c, len) = match units[i].value() {
            v if v < 0x80 => (v, 1),
            _ => U::decode(units, i),
        };
        count += usize::from((0xC0..=0x24F).contains(&c));
        i += len;
    }
    count
}

/// The first unit of the run of `word` bits that ends at unit `end`.
#[inline]
fn run_start(word: &[u64], end: usize) -> usize {
    let mut b = end / 64;
    // The units below `end` in its block that are not word characters.
    let mut gaps = !word[b] & (u64::MAX >> (63 - end % 64));
    loop {
        if gaps != 0 {
            return 64 * b + 64 - gaps.leading_zeros() as usize;
        }
        if b == 0 {
            return 0;
        }
        b -= 1;
        gaps = !word[b];
    }
}

/// The tokens the sampled unknown words of a chunk (`units`, its blocks' `masks`, `chars`
/// code points) with model value `value` stand for, each sampled word for [`WORD_SAMPLE`]:
/// `(judged, all)`. Past [`unknown_share`] of the value, `judged` shows the model cannot bound
/// the chunk (then it is counted exactly); it leaves out the words glued to punctuation while
/// they are few. `all` counts them too. Words glued to punctuation are sampled when `glued`.
pub fn unknown_word_tokens<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    chars: usize,
    value: f64,
    encoding: Encoding,
    glued: bool,
) -> (f64, f64) {
    let (spaced, glued) = sampled_unknown_words_in(units, masks, encoding, glued);
    let share = unknown_share(chars) * value.max(1.0);
    let tokens = |half_tokens: usize| (WORD_SAMPLE * half_tokens) as f64 / 2.0;
    // Words glued to punctuation count once they take half the share on their own: a few
    // unknown ones (options and placeholders in a message catalogue, "--ciphers=СТРОКА") do
    // not tip a chunk of ordinary words.
    let judged = if tokens(glued) > share / 2.0 {
        glued
    } else {
        0
    };
    (tokens(spaced + judged), tokens(spaced + glued))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::count::is_token;

    #[test]
    fn known_words_are_tokens_and_nonsense_is_not() {
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            // Four words: the first is looked up.
            assert_eq!(
                sampled_unknown_words(b"the cat sat down.", e, false),
                (0, 0)
            );
            assert_eq!(
                sampled_unknown_words(b"cduag cat sat down.", e, false),
                (4, 0)
            );
            // After a space, the space is part of the word's piece.
            assert_eq!(
                sampled_unknown_words(b" cduag cat sat down.", e, false),
                (4, 0)
            );
            // Half a token per letter with a diacritic, once there are more than 4.
            let word = "\nçñóüìãôø cat sat down.";
            assert_eq!(sampled_unknown_words(word.as_bytes(), e, false), (8, 0));
            let word = "\nξξξξξξξξξ cat sat down.";
            assert_eq!(sampled_unknown_words(word.as_bytes(), e, false), (4, 0));
            // Glued to punctuation or digits, or at the chunk's end: not looked up.
            assert_eq!(
                sampled_unknown_words(b"(cduag) 1cduag cduag", e, false),
                (0, 0)
            );
            // Unless glued words are asked for: then the one after the parenthesis counts.
            assert_eq!(
                sampled_unknown_words(b"(cduag) 1cduag cduag", e, true),
                (0, 4)
            );
            assert_eq!(sampled_unknown_words(b"x.the cat sat", e, true), (0, 0));
            // Every fourth word is looked up.
            let text = "the cat sat cduag ".repeat(8);
            assert_eq!(sampled_unknown_words(text.as_bytes(), e, false), (0, 0));
            let text = "cduag cat sat down ".repeat(8);
            assert_eq!(sampled_unknown_words(text.as_bytes(), e, false), (32, 0));
        }
    }

    /// The words [`sampled_unknown_words`] looks up, found one character at a time, and
    /// whether each follows punctuation.
    fn sampled_words(text: &str, glued: bool) -> Vec<(String, bool)> {
        let chars: Vec<char> = text.chars().collect();
        let is_word = |c: char| is_word_char(u32::from(c));
        let mut out = Vec::new();
        // Words after whitespace (or the start) and after punctuation, counted apart.
        let mut words = [0, 0];
        let mut i = 0;
        while i < chars.len() {
            if !is_word(chars[i]) || (i > 0 && is_word(chars[i - 1])) {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chars.len() && is_word(chars[j]) {
                j += 1;
            }
            let before = if i > 0 { chars[i - 1] } else { '\n' };
            let after_punctuation = before.is_ascii_graphic() && !before.is_ascii_alphanumeric();
            let separated = " \t\n\r".contains(before) || (glued && after_punctuation);
            let ended = j < chars.len() && (chars[j].is_ascii() || ends_a_word(chars[j].into()));
            if ended && separated {
                let kind = usize::from(after_punctuation);
                if words[kind] % WORD_SAMPLE == 0 {
                    let prefix = if " \t".contains(before) {
                        &chars[i - 1..i]
                    } else {
                        &chars[i..i]
                    };
                    out.push((
                        prefix.iter().chain(&chars[i..j]).collect(),
                        after_punctuation,
                    ));
                }
                words[kind] += 1;
            }
            i = j;
        }
        out
    }

    #[test]
    fn the_masks_find_the_words_a_character_walk_finds() {
        // Words across the 64-unit blocks, 2-byte and 3-byte characters across them in UTF-8.
        let pieces = [
            "cduag ",
            "the\t",
            "ξο\n",
            "カナ.",
            "naïve ",
            "(x) ",
            "1ab ",
            "\r\nç",
            "東京 ",
            "àà÷.à÷ààà.",
            "{qz}",
        ];
        for (e, glued) in [
            (Encoding::O200kBase, false),
            (Encoding::Cl100kBase, false),
            (Encoding::O200kBase, true),
            (Encoding::Cl100kBase, true),
        ] {
            for offset in 0..70 {
                let mut text = "-".repeat(offset);
                for i in 0..200 {
                    text.push_str(pieces[(i * 7 + offset) % pieces.len()]);
                }
                // Half tokens of the unknown words after whitespace and after punctuation.
                let mut unknown = [0, 0];
                for (w, after_punctuation) in sampled_words(&text, glued) {
                    let spaced = format!(" {w}");
                    if is_token(w.as_bytes(), e)
                        || (after_punctuation && is_token(spaced.as_bytes(), e))
                    {
                        continue;
                    }
                    let accented = w
                        .chars()
                        .filter(|c| ('\u{c0}'..='\u{24f}').contains(c))
                        .count();
                    unknown[usize::from(after_punctuation)] += accented.max(4);
                }
                let expected = (unknown[0], unknown[1]);
                assert_eq!(sampled_unknown_words(text.as_bytes(), e, glued), expected);
                let units: Vec<u32> = text.chars().map(u32::from).collect();
                assert_eq!(sampled_unknown_words(&units, e, glued), expected);
            }
        }
    }

    #[test]
    fn the_word_table_holds_the_word_tokens_and_nothing_else() {
        for (e, tokenizer) in [
            (Encoding::O200kBase, bpe_openai::o200k_base()),
            (Encoding::Cl100kBase, bpe_openai::cl100k_base()),
        ] {
            let table = word_tokens(e);
            let bpe = &tokenizer.bpe;
            let mut words = 0;
            for id in 0..bpe.num_tokens() as u32 {
                let bytes = bpe.token_bytes(id);
                if looks_like_a_word(bytes) {
                    words += 1;
                    assert!(table.contains(bytes), "{bytes:?}");
                }
            }
            assert!(words > 50_000, "{words}");
            for word in [
                "cduag",
                " cduag",
                "\tyexk",
                "ςφαηιχυ",
                " ßßßß",
                "ノノノノノ",
            ] {
                assert!(!is_token(word.as_bytes(), e));
                assert!(!table.contains(word.as_bytes()), "{word}");
            }
        }
    }

    #[test]
    fn short_words_read_at_once_are_looked_up_as_spelt() {
        let pieces = [
            "the",
            "cat",
            "cduag",
            "The",
            "x",
            "cryptography",
            "abcdefghijklmno",
            "aé",
            "abcdefghijklmnop",
            "ξο",
            "カナ",
        ];
        let befores = ["", " ", "\t", "\n", "(", "/", "1", "é", "\u{E000}"];
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let table = word_tokens(e);
            for before in befores {
                for piece in pieces {
                    for after in ["", " tail of the text", "é 東京 and more text here"] {
                        let text = format!("{before}{piece}{after}");
                        let mut units: Vec<u32> = text.chars().map(u32::from).collect();
                        if before == "\u{E000}" {
                            units[0] = 0x8000_0000;
                        }
                        let start = usize::from(!before.is_empty());
                        let end = start + piece.chars().count() - 1;
                        let spelt = table.holds_spelt(&units, start, end);
                        assert_eq!(table.holds(&units, start, end), spelt, "{text:?}");
                        if let Some(held) = table.holds_short_ascii(&units, start, end) {
                            assert_eq!(held, spelt, "{text:?}");
                        }
                        if before != "\u{E000}" {
                            let bytes = text.as_bytes();
                            let (start, end) = (before.len(), before.len() + piece.len() - 1);
                            assert_eq!(
                                table.holds(bytes, start, end),
                                table.holds_spelt(bytes, start, end),
                                "{text:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn vector_ascii16_matches_the_scalar_one() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..5_000 {
            let values: [u32; 16] = std::array::from_fn(|k| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                match (round + k) % 3 {
                    0 => [
                        0,
                        0x7F,
                        0x80,
                        0xFF,
                        0x100,
                        0x17F,
                        0x7FFF_FFFF,
                        0x8000_0000,
                        u32::MAX,
                    ][(seed % 9) as usize],
                    1 => (seed % 0x200) as u32,
                    _ => seed as u32,
                }
            });
            let expected = ascii16_scalar(&values);
            assert_eq!(ascii16(&values), expected, "{values:x?}");
        }
        for len in 1..=16 {
            let bytes: Vec<u8> = (0..len as u8).map(|k| b'a' + k).collect();
            let word = bytes
                .iter()
                .rev()
                .fold(0u128, |word, &byte| word << 8 | u128::from(byte));
            for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let table = word_tokens(e);
                assert_eq!(table.contains_short(word, len), table.contains(&bytes));
            }
            let h = mix(len as u64, word as u64);
            let h = if len > 8 {
                mix(h, (word >> 64) as u64)
            } else {
                h
            };
            assert_eq!(finish(h), hash(&bytes));
        }
    }

    #[test]
    fn vector_code_point_classes_match_the_scalar_ones() {
        let edges = [
            0,
            0x41,
            0x7F,
            0x80,
            0x7FF,
            0x800,
            0x1FFF,
            0x2000,
            0x2FFF,
            0x3000,
            0x303F,
            0x3040,
            0x30FF,
            0x3100,
            0x1EFFF,
            0x1F000,
            0x1FFFF,
            0x20000,
            0x10_FFFF,
            0xD800,
            0x7FFF_FFFF,
            0x8000_0000,
            0x8000_007F,
            0x8000_0080,
            u32::MAX,
        ];
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for round in 0..2_000 {
            let block: [u32; 64] = std::array::from_fn(|k| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                match (round + k) % 3 {
                    0 => edges[(seed % edges.len() as u64) as usize],
                    1 => (seed % 0x2_0000) as u32,
                    _ => seed as u32,
                }
            });
            let expected = code_point_classes_scalar(&block);
            assert_eq!(code_point_classes(&block), expected, "{block:x?}");
            #[cfg(target_arch = "x86_64")]
            // SAFETY: SSE2 is part of the x86_64 baseline.
            assert_eq!(unsafe { sse2_code_point_classes(&block) }, expected);
        }
    }

    #[test]
    fn utf8_and_ucs4_sample_the_same_words() {
        let text = "ςφαηιχυ\nχωυε ξο ψαγν. カタカナ ひらがな naïve café cduag\r\nçççç.ç (ψαγν) ";
        let units: Vec<u32> = text.chars().map(u32::from).collect();
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let n = sampled_unknown_words(text.as_bytes(), e, true);
            assert!(n.0 > 0);
            assert_eq!(sampled_unknown_words(&units, e, true), n);
        }
    }
}
