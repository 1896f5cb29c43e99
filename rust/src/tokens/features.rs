//! The estimator's single pass over the text.
//!
//! Each feature approximates one way the o200k/cl100k pre-tokenisers cut text (a word, a digit
//! group, a punctuation run, a whitespace run, a CJK character...), so a linear model over them
//! tracks the exact count. The order is the one `tests/reference_tokens.py` (the pure-Python
//! reference the calibrator fits on) uses; the property tests check both agree.
//!
//! The pass reads 64 units at a time as one bit mask per character class (SSE2 on x86_64)
//! and derives the run features from shifts and population counts of the masks; non-ASCII
//! characters are visited one by one through a per-family table of categories. The original
//! one-run-at-a-time pass is kept in the tests as the oracle the block pass must match.

use std::sync::OnceLock;

use super::coefficients::{FEATURE_COUNT, HANGUL_FIRST, HANGUL_LAST, HAN_FIRST, HAN_LAST};

use slots::*;

/// Index of each feature in [`Features`].
pub mod slots {
    pub const SEG_LEN_1: usize = 0; // 1..=4 use indices 0..=3
    pub const SEG_LEN_5_6: usize = 4;
    pub const SEG_LEN_7_8: usize = 5;
    pub const SEG_LEN_9_11: usize = 6;
    pub const SEG_LEN_12P: usize = 7;
    pub const SEG_LONG_EXTRA: usize = 8;
    pub const CAPS_LETTERS: usize = 9;
    pub const DIGIT_GROUPS: usize = 10;
    pub const PUNCT_RUN_1: usize = 11;
    pub const PUNCT_RUN_2: usize = 12;
    pub const PUNCT_RUN_3P: usize = 13;
    pub const PUNCT_EXTRA: usize = 14;
    pub const PUNCT_GLUED: usize = 15;
    pub const SPACE_SINGLE: usize = 16;
    pub const SPACE_RUNS: usize = 17;
    pub const SPACE_RUN_CHARS: usize = 18;
    pub const NEWLINE_RUNS: usize = 19;
    pub const NEWLINE_CHARS: usize = 20;
    pub const HAN_SINGLE: usize = 21;
    pub const HAN_OTHER: usize = 22;
    pub const KANA: usize = 23;
    pub const HANGUL_SINGLE: usize = 24;
    pub const HANGUL_OTHER: usize = 25;
    pub const CJK_PUNCT: usize = 26;
    pub const OTHER_2BYTE: usize = 27;
    pub const OTHER_2BYTE_RUNS: usize = 28;
    pub const OTHER_3BYTE: usize = 29;
    pub const FOUR_BYTE: usize = 30;
    pub const HAN_KANA_RUNS: usize = 31;
    pub const HANGUL_RUNS: usize = 32;
    pub const HAN_DOUBLE: usize = 33;
    pub const HANGUL_DOUBLE: usize = 34;
    /// Hangul runs whose first syllable does not follow a space or tab: the vocabularies hold many
    /// hangul words with their leading space, so a word glued to punctuation (or starting a line)
    /// is spelled from smaller pieces.
    pub const HANGUL_BARE_RUNS: usize = 35;
    // The guard's features (their coefficients are 0): signs of text the model cannot bound.
    /// ASCII letters that are the third or later in a row of consonants, or of vowels (`y`
    /// counted as a vowel): rare in words, most letters of random strings.
    pub const HARD_LETTERS: usize = 36;
    /// Tabs not right after a tab or a line break, and spaces right after a tab: a tab inside a
    /// line is a token of its own (a word takes a space, not a tab, into its token), and
    /// indentation repeats one character.
    pub const MIXED_WHITESPACE: usize = 37;
    /// ASCII control characters other than tab, line feed and carriage return, and carriage
    /// returns right after one (a line break is at most one of them before a line feed).
    pub const CONTROL_CHARS: usize = 38;
    /// 2-byte UTF-8 characters that are not one token alone: combining marks, rare letters.
    pub const RARE_TWO_BYTE: usize = 39;
}

/// Feature counts of one text.
pub type Features = [u64; FEATURE_COUNT];

/// Per-family bitsets: which ideographs / hangul syllables are one (`*_single`) or two
/// (`*_double`) tokens on their own.
pub struct SingleTokenTables {
    pub han_single: &'static [u64],
    pub han_double: &'static [u64],
    pub hangul_single: &'static [u64],
    pub hangul_double: &'static [u64],
    /// Which 2-byte UTF-8 characters (U+0080..=U+07FF) are one token alone.
    pub two_byte_single: &'static [u64],
    /// The [`Category`] of every BMP code point under these tables, built on first use.
    pub categories: &'static OnceLock<Box<[u8; 0x10000]>>,
}

impl SingleTokenTables {
    fn categories(&self) -> &[u8; 0x10000] {
        self.categories.get_or_init(|| {
            let mut table = Box::new([0u8; 0x10000]);
            for (c, category) in table.iter_mut().enumerate().skip(0x80) {
                *category = non_ascii_category(c as u32, self);
            }
            table
        })
    }
}

const LOWER: u8 = 1;
const UPPER: u8 = 2;
const DIGIT: u8 = 3;
const SPACE: u8 = 4;
const NEWLINE: u8 = 5;
const PUNCT: u8 = 6;

const ASCII_CLASS: [u8; 128] = {
    let mut t = [PUNCT; 128];
    let mut b = 0;
    while b < 128 {
        t[b] = match b as u8 {
            b'a'..=b'z' => LOWER,
            b'A'..=b'Z' => UPPER,
            b'0'..=b'9' => DIGIT,
            b' ' | b'\t' => SPACE,
            b'\n' | b'\r' => NEWLINE,
            _ => PUNCT,
        };
        b += 1;
    }
    t
};

/// A code unit the pass can read: UTF-8 bytes (`&str`) or UCS-4 code points (what CPython's
/// stable ABI hands out without an encoding pass).
pub trait Unit: Copy {
    fn value(self) -> u32;
    /// The code point starting at `units[i]` and how many units it spans (`units[i] >= 0x80`).
    fn decode(units: &[Self], i: usize) -> (u32, usize);
    /// The class masks of a block of 64 units.
    fn masks(block: &[Self; 64]) -> Masks;
    /// [`Unit::masks`] with AVX-512: one comparison per class for the whole block.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512 F and BW (see [`has_avx512`]).
    unsafe fn masks_avx512(block: &[Self; 64]) -> Masks;
    /// The [`CategoryMasks`] of the `leads` of a block (see [`avx512::category_masks`]), where
    /// each unit is a code point; `None` for UTF-8, whose characters span several units.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512 F and BW (see [`has_avx512`]).
    unsafe fn category_masks_avx512(
        _block: &[Self; 64],
        _leads: u64,
        _categories: &[u8; 0x10000],
    ) -> Option<CategoryMasks> {
        None
    }
}

/// Per category (index 1 to 12, see [`CATEGORY_SLOTS`]; index 0 unused), the units of a block
/// whose character is of that category.
pub type CategoryMasks = [u64; 13];

/// Whether the CPU has the AVX-512 instructions [`Unit::masks_avx512`] uses.
#[inline]
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

impl Unit for u8 {
    #[inline]
    fn value(self) -> u32 {
        self as u32
    }

    #[inline]
    fn decode(bytes: &[u8], i: usize) -> (u32, usize) {
        decode_utf8(bytes, i)
    }

    #[inline(always)]
    fn masks(block: &[u8; 64]) -> Masks {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of the x86_64 baseline: every x86_64 CPU has it.
        return unsafe { sse2::bytes(block) };
        #[cfg(not(target_arch = "x86_64"))]
        return scalar_masks(block);
    }

    #[inline(always)]
    unsafe fn masks_avx512(block: &[u8; 64]) -> Masks {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked the CPU has AVX-512 F and BW.
        return unsafe { avx512::bytes(block) };
        #[cfg(not(target_arch = "x86_64"))]
        return Self::masks(block);
    }
}

impl Unit for u32 {
    #[inline]
    fn value(self) -> u32 {
        self
    }

    #[inline]
    fn decode(units: &[u32], i: usize) -> (u32, usize) {
        (units[i], 1)
    }

    #[inline(always)]
    fn masks(block: &[u32; 64]) -> Masks {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of the x86_64 baseline: every x86_64 CPU has it.
        return unsafe { sse2::code_points(block) };
        #[cfg(not(target_arch = "x86_64"))]
        return scalar_masks(block);
    }

    #[inline(always)]
    unsafe fn masks_avx512(block: &[u32; 64]) -> Masks {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked the CPU has AVX-512 F and BW.
        return unsafe { avx512::code_points(block) };
        #[cfg(not(target_arch = "x86_64"))]
        return Self::masks(block);
    }

    #[inline(always)]
    unsafe fn category_masks_avx512(
        block: &[u32; 64],
        leads: u64,
        categories: &[u8; 0x10000],
    ) -> Option<CategoryMasks> {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller checked the CPU has AVX-512 F and BW.
        return Some(unsafe { avx512::category_masks(block, leads, categories) });
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (block, leads, categories);
            None
        }
    }
}

#[inline]
fn class(v: u32) -> u8 {
    if v < 128 {
        ASCII_CLASS[v as usize]
    } else {
        0
    }
}

#[inline]
fn bit(table: &[u64], index: u32) -> u64 {
    table[(index / 64) as usize] >> (index % 64) & 1
}

#[inline]
fn in_bitset(table: &[u64], index: u32) -> bool {
    bit(table, index) == 1
}

/// Decodes the non-ASCII character starting at `i` (the text is valid UTF-8): (code point, len).
#[inline]
fn decode_utf8(bytes: &[u8], i: usize) -> (u32, usize) {
    let b0 = bytes[i] as u32;
    if b0 < 0xE0 {
        (((b0 & 0x1F) << 6) | (bytes[i + 1] as u32 & 0x3F), 2)
    } else if b0 < 0xF0 {
        let c = ((b0 & 0x0F) << 12)
            | ((bytes[i + 1] as u32 & 0x3F) << 6)
            | (bytes[i + 2] as u32 & 0x3F);
        (c, 3)
    } else {
        let c = ((b0 & 0x07) << 18)
            | ((bytes[i + 1] as u32 & 0x3F) << 12)
            | ((bytes[i + 2] as u32 & 0x3F) << 6)
            | (bytes[i + 3] as u32 & 0x3F);
        (c, 4)
    }
}

fn non_ascii_slot(c: u32, tables: &SingleTokenTables) -> usize {
    match c {
        HAN_FIRST..=HAN_LAST => {
            if in_bitset(tables.han_single, c - HAN_FIRST) {
                HAN_SINGLE
            } else if in_bitset(tables.han_double, c - HAN_FIRST) {
                HAN_DOUBLE
            } else {
                HAN_OTHER
            }
        }
        0x3400..=0x4DBF | 0xF900..=0xFAFF | 0x20000..=0x2FFFF => HAN_OTHER,
        0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9F => KANA,
        HANGUL_FIRST..=HANGUL_LAST => {
            if in_bitset(tables.hangul_single, c - HANGUL_FIRST) {
                HANGUL_SINGLE
            } else if in_bitset(tables.hangul_double, c - HANGUL_FIRST) {
                HANGUL_DOUBLE
            } else {
                HANGUL_OTHER
            }
        }
        0x1100..=0x11FF | 0x3130..=0x318F | 0xD7A4..=0xD7FF => HANGUL_OTHER,
        0x3000..=0x303F | 0xFF00..=0xFF65 => CJK_PUNCT,
        0x80..=0x7FF => OTHER_2BYTE,
        0x800..=0xFFFF => OTHER_3BYTE,
        _ => FOUR_BYTE,
    }
}

/// The category of a non-ASCII character: [`non_ascii_slot`], told apart from the rare 2-byte
/// characters, which count in both [`OTHER_2BYTE`] and [`RARE_TWO_BYTE`].
fn non_ascii_category(c: u32, tables: &SingleTokenTables) -> u8 {
    let slot = non_ascii_slot(c, tables);
    if slot == OTHER_2BYTE && !in_bitset(tables.two_byte_single, c - 0x80) {
        category_of_slot(RARE_TWO_BYTE)
    } else {
        category_of_slot(slot)
    }
}

/// The class of a non-ASCII character: its feature slot, numbered from 1 (0 stands for "no
/// character": the one before a run of non-ASCII characters).
const CATEGORY_SLOTS: [usize; 13] = [
    usize::MAX,
    HAN_SINGLE,
    HAN_DOUBLE,
    HAN_OTHER,
    KANA,
    HANGUL_SINGLE,
    HANGUL_DOUBLE,
    HANGUL_OTHER,
    CJK_PUNCT,
    OTHER_2BYTE,
    OTHER_3BYTE,
    FOUR_BYTE,
    RARE_TWO_BYTE,
];

const fn category_of_slot(slot: usize) -> u8 {
    let mut k = 1;
    while k < CATEGORY_SLOTS.len() {
        if CATEGORY_SLOTS[k] == slot {
            return k as u8;
        }
        k += 1;
    }
    panic!("not a non-ASCII slot")
}

/// 1 for ideographs and kana, 2 for hangul, 0 otherwise: CJK "words" are runs of one kind.
const fn kind_of_category(category: usize) -> u32 {
    match CATEGORY_SLOTS[category] {
        HAN_SINGLE | HAN_DOUBLE | HAN_OTHER | KANA => 1,
        HANGUL_SINGLE | HANGUL_DOUBLE | HANGUL_OTHER => 2,
        _ => 0,
    }
}

/// Blocks of code points with at least this many non-ASCII characters have them counted
/// with AVX-512 where the CPU has it: below it, the loop over them is as quick.
const VECTOR_LEADS: u32 = 16;

/// Packed counters of the non-ASCII characters of a few blocks (at most [`PACKED_MAX`], so 7
/// bits apiece never overflow): one field per category (field `category - 1`) and four run
/// counts.
const FIELD_BITS: u32 = 7;
/// The most characters the packed counters take before they are added to the totals.
const PACKED_MAX: u32 = (1 << FIELD_BITS) - 1;
const FIELD_HAN_KANA_RUNS: u32 = 12;
const FIELD_HANGUL_RUNS: u32 = 13;
const FIELD_OTHER_2BYTE_RUNS: u32 = 14;
/// Counted in the half of [`INCREMENTS`] for characters that follow no space or tab.
const FIELD_HANGUL_BARE_RUNS: u32 = 15;
const FIELDS: usize = 16;

/// Whether a category is a 2-byte "other" character, rare or not.
const fn is_two_byte(category: usize) -> bool {
    matches!(CATEGORY_SLOTS[category], OTHER_2BYTE | RARE_TWO_BYTE)
}

/// The packed increments of a character of category `c` after one of category `p` (0: after
/// ASCII or at the start), at index `bare << 8 | p << 4 | c`, where `bare` is 1 unless the
/// unit before the character is a space or a tab (a hangul run that starts there is bare).
/// One table lookup per character rather than a lookup and the arithmetic of the bare run.
const INCREMENTS: [u128; 512] = {
    let mut table = [0u128; 512];
    let mut p = 0;
    while p < CATEGORY_SLOTS.len() {
        let mut c = 1;
        while c < CATEGORY_SLOTS.len() {
            let (kp, kc) = (kind_of_category(p), kind_of_category(c));
            let mut inc = 1u128 << ((c as u32 - 1) * FIELD_BITS);
            if CATEGORY_SLOTS[c] == RARE_TWO_BYTE {
                inc |= 1 << ((category_of_slot(OTHER_2BYTE) as u32 - 1) * FIELD_BITS);
            }
            if kc == 1 && kp != 1 {
                inc |= 1 << (FIELD_HAN_KANA_RUNS * FIELD_BITS);
            }
            if kc == 2 && kp != 2 {
                inc |= 1 << (FIELD_HANGUL_RUNS * FIELD_BITS);
            }
            if is_two_byte(c) && !is_two_byte(p) {
                inc |= 1 << (FIELD_OTHER_2BYTE_RUNS * FIELD_BITS);
            }
            table[p << 4 | c] = inc;
            if kc == 2 && kp != 2 {
                inc |= 1 << (FIELD_HANGUL_BARE_RUNS * FIELD_BITS);
            }
            table[1 << 8 | p << 4 | c] = inc;
            c += 1;
        }
        p += 1;
    }
    table
};

/// Category of a code point past the BMP.
#[inline]
fn astral_category(c: u32) -> u8 {
    const HAN: u8 = category_of_slot(HAN_OTHER);
    const FOUR: u8 = category_of_slot(FOUR_BYTE);
    if (0x20000..=0x2FFFF).contains(&c) {
        HAN
    } else {
        FOUR
    }
}

/// Class masks of up to 64 consecutive units: bit `i` describes unit `i`; bits past the end
/// of the text are clear in every mask, `valid` included.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Masks {
    lower: u64,
    upper: u64,
    digit: u64,
    space: u64,
    newline: u64,
    non_ascii: u64,
    /// The non-ASCII units a character starts at (all of them in UCS-4).
    lead: u64,
    /// ASCII vowels, `y` included.
    vowel: u64,
    tab: u64,
    carriage_return: u64,
    /// Units below 0x20, DEL, and non-ASCII units: the control characters among the
    /// punctuation.
    low: u64,
    valid: u64,
}

/// [`Masks`] one unit at a time: partial blocks, and targets without a vector path.
fn scalar_masks<U: Unit>(units: &[U]) -> Masks {
    let mut m = Masks {
        valid: if units.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << units.len()) - 1
        },
        ..Masks::default()
    };
    for (i, unit) in units.iter().take(64).enumerate() {
        let b = 1u64 << i;
        let v = unit.value();
        if v < 0x80 {
            if b"aeiouyAEIOUY".contains(&(v as u8)) {
                m.vowel |= b;
            }
            if v == 0x09 {
                m.tab |= b;
            }
            if v == 0x0D {
                m.carriage_return |= b;
            }
            if v < 0x20 || v == 0x7F {
                m.low |= b;
            }
        } else {
            m.low |= b;
        }
        match class(v) {
            LOWER => m.lower |= b,
            UPPER => m.upper |= b,
            DIGIT => m.digit |= b,
            SPACE => m.space |= b,
            NEWLINE => m.newline |= b,
            PUNCT => {}
            _ => {
                m.non_ascii |= b;
                if unit.value() >= 0xC0 || size_of::<U>() > 1 {
                    m.lead |= b;
                }
            }
        }
    }
    m
}

/// The vector classifier: SSE2 is part of the x86_64 baseline, so no runtime detection.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::Masks;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "sse2")]
    fn between(b: __m128i, lo: u8, hi: u8) -> u64 {
        let v = _mm_and_si128(
            _mm_cmpgt_epi8(b, _mm_set1_epi8(lo as i8 - 1)),
            _mm_cmplt_epi8(b, _mm_set1_epi8(hi as i8 + 1)),
        );
        _mm_movemask_epi8(v) as u32 as u64
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn equal(b: __m128i, x: u8) -> __m128i {
        _mm_cmpeq_epi8(b, _mm_set1_epi8(x as i8))
    }

    /// Adds the masks of 16 bytes (ASCII as themselves, everything else with the high bit
    /// set) at bit `shift`.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn classify(m: &mut Masks, b: __m128i, shift: u32) {
        let non_ascii = _mm_movemask_epi8(b) as u32 as u64;
        m.lower |= between(b, b'a', b'z') << shift;
        m.upper |= between(b, b'A', b'Z') << shift;
        m.digit |= between(b, b'0', b'9') << shift;
        let tab = equal(b, b'\t');
        let carriage_return = equal(b, b'\r');
        let space = _mm_movemask_epi8(_mm_or_si128(equal(b, b' '), tab)) as u32 as u64;
        let newline =
            _mm_movemask_epi8(_mm_or_si128(equal(b, b'\n'), carriage_return)) as u32 as u64;
        m.space |= space << shift;
        m.newline |= newline << shift;
        m.non_ascii |= non_ascii << shift;
        // A letter with bit 5 set is its lower-case form; no other byte maps onto a vowel.
        // `a`/`e` differ in bit 2 only, `i`/`y` in bit 4 only: one comparison each.
        let folded = _mm_or_si128(b, _mm_set1_epi8(0x20));
        let a_e = equal(_mm_andnot_si128(_mm_set1_epi8(0x04), folded), b'a');
        let i_y = equal(_mm_andnot_si128(_mm_set1_epi8(0x10), folded), b'i');
        let vowel = _mm_or_si128(
            _mm_or_si128(a_e, i_y),
            _mm_or_si128(equal(folded, b'o'), equal(folded, b'u')),
        );
        m.vowel |= (_mm_movemask_epi8(vowel) as u32 as u64) << shift;
        m.tab |= (_mm_movemask_epi8(tab) as u32 as u64) << shift;
        m.carriage_return |= (_mm_movemask_epi8(carriage_return) as u32 as u64) << shift;
        // Signed: the non-ASCII bytes are negative, so below 0x20 too.
        let low = _mm_or_si128(_mm_cmplt_epi8(b, _mm_set1_epi8(0x20)), equal(b, 0x7F));
        m.low |= (_mm_movemask_epi8(low) as u32 as u64) << shift;
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    pub fn bytes(block: &[u8; 64]) -> Masks {
        let mut m = Masks {
            valid: u64::MAX,
            ..Masks::default()
        };
        for k in 0..4 {
            // SAFETY: k < 4, so the 16 bytes read lie inside `block`; the load has no
            // alignment requirement.
            let b = unsafe { _mm_loadu_si128(block.as_ptr().add(16 * k).cast()) };
            classify(&mut m, b, 16 * k as u32);
            // UTF-8 continuation bytes, 0x80..=0xBF, are the signed bytes below -64.
            let continuation = _mm_cmplt_epi8(b, _mm_set1_epi8(-64));
            m.lead |=
                ((_mm_movemask_epi8(_mm_andnot_si128(continuation, b)) as u32) as u64) << (16 * k);
        }
        m
    }

    /// 4 code points, as loaded.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn load4(block: &[u32; 64], k: usize) -> __m128i {
        // SAFETY: k < 16, so the 4 code points read lie inside `block`; the load has no
        // alignment requirement.
        unsafe { _mm_loadu_si128(block.as_ptr().add(4 * k).cast()) }
    }

    /// 8 code points as 16-bit lanes, ASCII as itself and everything else >= 0x80. The
    /// signed saturating pack keeps 0..=0x7FFF and turns the rest into 0x7FFF, or a negative
    /// lane for units of 2^31 and more (no code point); those are kept >= 0x80 by their high
    /// byte, OR-ed into the low 15 bits, so that the unsigned pack after this one cannot take
    /// them for ASCII.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn pack8(a: __m128i, b: __m128i) -> __m128i {
        let v = _mm_packs_epi32(a, b);
        _mm_or_si128(
            _mm_and_si128(v, _mm_set1_epi16(0x7FFF)),
            _mm_srli_epi16(v, 8),
        )
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    pub fn code_points(block: &[u32; 64]) -> Masks {
        let mut m = Masks {
            valid: u64::MAX,
            ..Masks::default()
        };
        for k in 0..4 {
            let lo = pack8(load4(block, 4 * k), load4(block, 4 * k + 1));
            let hi = pack8(load4(block, 4 * k + 2), load4(block, 4 * k + 3));
            // Unsigned saturation: 0x80 and more become 0x80..=0xFF.
            classify(&mut m, _mm_packus_epi16(lo, hi), 16 * k as u32);
        }
        m.lead = m.non_ascii;
        m
    }
}

/// The classifier on CPUs with AVX-512 (BW): a block of 64 units is one register, and each
/// class one comparison into a mask, where SSE2 takes four comparisons and four moves of the
/// sign bits.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{CategoryMasks, Masks};
    use std::arch::x86_64::*;

    /// Bytes `lo..=hi`: one subtraction and one unsigned comparison.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn between(b: __m512i, lo: u8, hi: u8) -> u64 {
        _mm512_cmplt_epu8_mask(
            _mm512_sub_epi8(b, _mm512_set1_epi8(lo as i8)),
            _mm512_set1_epi8((hi - lo + 1) as i8),
        )
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn equal(b: __m512i, x: u8) -> u64 {
        _mm512_cmpeq_epi8_mask(b, _mm512_set1_epi8(x as i8))
    }

    /// The masks of 64 bytes, ASCII as themselves and everything else with the high bit set
    /// (as [`super::sse2`] classifies them).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    fn classify(b: __m512i) -> Masks {
        let tab = equal(b, b'\t');
        let carriage_return = equal(b, b'\r');
        // A letter with bit 5 set is its lower-case form; `a`/`e` differ in bit 2 only, `i`/`y`
        // in bit 4 only.
        let folded = _mm512_or_si512(b, _mm512_set1_epi8(0x20));
        let vowel = equal(_mm512_andnot_si512(_mm512_set1_epi8(0x04), folded), b'a')
            | equal(_mm512_andnot_si512(_mm512_set1_epi8(0x10), folded), b'i')
            | equal(folded, b'o')
            | equal(folded, b'u');
        Masks {
            lower: between(b, b'a', b'z'),
            upper: between(b, b'A', b'Z'),
            digit: between(b, b'0', b'9'),
            space: equal(b, b' ') | tab,
            newline: equal(b, b'\n') | carriage_return,
            non_ascii: _mm512_movepi8_mask(b),
            lead: 0,
            vowel,
            tab,
            carriage_return,
            // Signed: the non-ASCII bytes are negative, so below 0x20 too.
            low: _mm512_cmplt_epi8_mask(b, _mm512_set1_epi8(0x20)) | equal(b, 0x7F),
            valid: u64::MAX,
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub fn bytes(block: &[u8; 64]) -> Masks {
        // SAFETY: the 64 bytes read are `block`; the load has no alignment requirement.
        let b = unsafe { _mm512_loadu_si512(block.as_ptr().cast()) };
        let mut m = classify(b);
        // UTF-8 continuation bytes, 0x80..=0xBF, are the signed bytes below -64.
        m.lead = m.non_ascii & !_mm512_cmplt_epi8_mask(b, _mm512_set1_epi8(-64));
        m
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub fn code_points(block: &[u32; 64]) -> Masks {
        // Unsigned saturation: 0x80 and more (any unit, code point or not) become 0x80..=0xFF.
        let narrow = |k: usize| {
            // SAFETY: k < 4, so the 16 code points read lie inside `block`; the load has no
            // alignment requirement.
            let v = unsafe { _mm512_loadu_si512(block.as_ptr().add(16 * k).cast()) };
            _mm512_cvtusepi32_epi8(v)
        };
        let b = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(narrow(0)), narrow(1));
        let b = _mm512_inserti32x4::<3>(_mm512_inserti32x4::<2>(b, narrow(2)), narrow(3));
        let mut m = classify(b);
        m.lead = m.non_ascii;
        m
    }

    /// The [`CategoryMasks`] of the units `leads` of a block of code points, 16 at a time:
    /// the categories of BMP code points gathered from the `categories` table, those past it
    /// as [`super::astral_category`] gives them, then one comparison per category. The
    /// other units are in no mask.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    pub fn category_masks(
        block: &[u32; 64],
        leads: u64,
        categories: &[u8; 0x10000],
    ) -> CategoryMasks {
        const HAN: i32 = super::category_of_slot(super::HAN_OTHER) as i32;
        const FOUR: i32 = super::category_of_slot(super::FOUR_BYTE) as i32;
        let part = |k: usize| {
            // SAFETY: k < 4, so the 16 code points read lie inside `block`; the load has no
            // alignment requirement.
            let v = unsafe { _mm512_loadu_si512(block.as_ptr().add(16 * k).cast()) };
            let lanes = (leads >> (16 * k)) as u16;
            let bmp = lanes & _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(0x10000));
            // The 4 bytes at the code point rounded down to a multiple of 4, then its own.
            let aligned = _mm512_andnot_si512(_mm512_set1_epi32(3), v);
            // SAFETY: only the lanes of `bmp` are read, each 4 bytes from a multiple of 4
            // below 0x10000: inside `categories`, which is 0x10000 bytes long.
            let words = unsafe {
                _mm512_mask_i32gather_epi32::<1>(
                    _mm512_setzero_si512(),
                    bmp,
                    aligned,
                    categories.as_ptr().cast(),
                )
            };
            let shift = _mm512_slli_epi32::<3>(_mm512_and_si512(v, _mm512_set1_epi32(3)));
            let in_bmp = _mm512_and_si512(_mm512_srlv_epi32(words, shift), _mm512_set1_epi32(0xFF));
            let han = _mm512_cmplt_epu32_mask(
                _mm512_sub_epi32(v, _mm512_set1_epi32(0x20000)),
                _mm512_set1_epi32(0x10000),
            );
            let astral =
                _mm512_mask_blend_epi32(han, _mm512_set1_epi32(FOUR), _mm512_set1_epi32(HAN));
            let category = _mm512_mask_blend_epi32(lanes & !bmp, in_bmp, astral);
            _mm512_cvtepi32_epi8(category)
        };
        let c = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(part(0)), part(1));
        let c = _mm512_inserti32x4::<3>(_mm512_inserti32x4::<2>(c, part(2)), part(3));
        let mut masks = [0u64; 13];
        for (k, mask) in masks.iter_mut().enumerate().skip(1) {
            *mask = _mm512_cmpeq_epi8_mask(c, _mm512_set1_epi8(k as i8));
        }
        masks
    }
}

/// The length of the run of `mask` bits ending just below bit `q` (continuing into earlier
/// blocks by `tail`, the run length at the end of the previous block).
#[inline]
fn run_before(mask: u64, q: u32, tail: u64) -> u64 {
    if q == 0 {
        return tail;
    }
    let ones = u64::from((!(mask << (64 - q))).leading_zeros());
    if ones == u64::from(q) {
        ones + tail
    } else {
        ones
    }
}

/// The run length of `mask` at its block's end, given `tail` before it.
#[inline]
fn tail_after(mask: u64, tail: u64) -> u64 {
    if mask == u64::MAX {
        tail + 64
    } else {
        u64::from((!mask).leading_zeros())
    }
}

/// Shifts a mask one unit later, bringing in the previous block's last bit.
#[inline(always)]
fn later(mask: u64, carry: u64) -> u64 {
    (mask << 1) | carry
}

/// The state of the block pass between blocks: the last bit of each mask (`c_*`, 0 or 1),
/// run lengths open at the block end, and counts the features are derived from at the end.
#[derive(Default)]
struct Pass {
    c_letter: u64,
    c_lower: u64,
    c_upper: u64,
    c_digit: u64,
    c_space: u64,
    c_space_start: u64,
    c_newline: u64,
    c_punct: u64,
    c_punct_start: u64,
    c_punct_1: u64,
    c_non_ascii: u64,
    c_tab: u64,
    c_carriage_return: u64,
    /// The last two bits (bit 1 the very last) of the consonant, vowel and punctuation masks.
    c2_consonant: u64,
    c2_vowel: u64,
    /// Last bit of `at_offset[k]`: letters at offset >= k within their segment.
    c_offset: [u64; 13],
    /// Per k, the number of letters at offset >= k in their segment (index 0 unused).
    offsets: [u64; 14],
    digit_tail: u64,
    upper_tail: u64,
    digit_groups: u64,
    caps_letters: u64,
    space_runs: u64,
    space_long_runs: u64,
    space_chars: u64,
    newline_runs: u64,
    newline_chars: u64,
    punct_runs: u64,
    punct_long_2: u64,
    punct_long_3: u64,
    punct_chars: u64,
    punct_glued: u64,
    hard_letters: u64,
    mixed_whitespace: u64,
    control_chars: u64,
    /// Category of the last non-ASCII character.
    last_category: u8,
    /// Per [`FIELDS`] field, the non-ASCII counts so far but those in `packed`.
    non_ascii: [u64; FIELDS],
    /// The packed counts of the last `pending` non-ASCII characters: unpacked once they are
    /// too many for a field, not after every block (text with a few accented letters per
    /// block would pay for sixteen fields each time).
    packed: u128,
    pending: u32,
}

#[inline(always)]
fn count(mask: u64) -> u64 {
    u64::from(mask.count_ones())
}

/// Bits of `mask` whose two predecessors are set too (`carry2`: the previous block's last two
/// bits, the very last as bit 1).
#[inline(always)]
fn third_in_row(mask: u64, carry2: u64) -> u64 {
    mask & ((mask << 1) | carry2 >> 1) & ((mask << 2) | carry2)
}

impl Pass {
    /// Counts one block of 64 units (or fewer at the text's end) starting at `base`.
    #[inline(always)]
    fn block<U: Unit, const AVX512: bool>(
        &mut self,
        m: Masks,
        units: &[U],
        base: usize,
        tables: &SingleTokenTables,
    ) {
        let letter = m.lower | m.upper;
        let punct = m.valid & !(letter | m.digit | m.space | m.newline | m.non_ascii);

        // Letter segments: a letter run, cut where a lower-case letter meets an upper-case one.
        // offsets[k] sums, over segments, max(0, len - k + 1): differences give the length
        // histogram without visiting a segment.
        let seg_start =
            (letter & !later(letter, self.c_letter)) | (m.upper & later(m.lower, self.c_lower));
        let inside = letter & !seg_start;
        let mut at = letter;
        self.offsets[1] += count(at);
        for k in 2..=13 {
            let next = inside & later(at, self.c_offset[k - 1]);
            self.c_offset[k - 1] = at >> 63;
            at = next;
            self.offsets[k] += count(at);
        }
        // All-caps segments are the upper-case blocks a non-letter follows.
        let mut caps_ends = !letter & later(m.upper, self.c_upper);
        while caps_ends != 0 {
            let len = run_before(m.upper, caps_ends.trailing_zeros(), self.upper_tail);
            if len >= 2 {
                self.caps_letters += len;
            }
            caps_ends &= caps_ends - 1;
        }
        self.upper_tail = tail_after(m.upper, self.upper_tail);

        let mut digit_ends = !m.digit & later(m.digit, self.c_digit);
        while digit_ends != 0 {
            let len = run_before(m.digit, digit_ends.trailing_zeros(), self.digit_tail);
            self.digit_groups += len.div_ceil(3);
            digit_ends &= digit_ends - 1;
        }
        self.digit_tail = tail_after(m.digit, self.digit_tail);

        let space_start = m.space & !later(m.space, self.c_space);
        self.space_runs += count(space_start);
        self.space_long_runs += count(m.space & later(space_start, self.c_space_start));
        self.space_chars += count(m.space);

        self.newline_runs += count(m.newline & !later(m.newline, self.c_newline));
        self.newline_chars += count(m.newline);

        let punct_start = punct & !later(punct, self.c_punct);
        let punct_1 = punct & later(punct_start, self.c_punct_start);
        let punct_2 = punct & later(punct_1, self.c_punct_1);
        self.punct_runs += count(punct_start);
        self.punct_long_2 += count(punct_1);
        self.punct_long_3 += count(punct_2);
        self.punct_chars += count(punct);
        self.punct_glued += count(letter & later(punct_start, self.c_punct_start));

        // The guard's features.
        let consonant = letter & !m.vowel;
        self.hard_letters += count(
            third_in_row(consonant, self.c2_consonant) | third_in_row(m.vowel, self.c2_vowel),
        );
        let after_tab = later(m.tab, self.c_tab);
        let after_line = later(m.newline, self.c_newline);
        self.mixed_whitespace +=
            count((m.tab & !(after_tab | after_line)) | (m.space & !m.tab & after_tab));
        let cr_after_cr = m.carriage_return & later(m.carriage_return, self.c_carriage_return);
        self.control_chars += count((m.low & punct) | cr_after_cr);

        // Non-ASCII characters one by one, but without a loop per run (their runs are short,
        // and each exit would be a mispredicted branch) and without branches on their class:
        // a table gives the category, another the packed counter increments.
        let mut leads = m.lead;
        let by_category = if AVX512 && leads.count_ones() >= VECTOR_LEADS {
            let block = units.get(base..base + 64).and_then(|b| b.try_into().ok());
            // SAFETY: `AVX512` only where the CPU has it.
            block.and_then(|b| unsafe { U::category_masks_avx512(b, leads, tables.categories()) })
        } else {
            None
        };
        if let Some(by_category) = by_category {
            self.count_categories(&by_category, m, leads);
        } else if leads != 0 {
            let n = leads.count_ones();
            if self.pending + n > PACKED_MAX {
                self.unpack();
            }
            self.pending += n;
            let categories = tables.categories();
            let after_non_ascii = later(m.non_ascii, self.c_non_ascii);
            let after_space = later(m.space, self.c_space);
            let mut last = self.last_category;
            let mut packed = self.packed;
            while leads != 0 {
                let q = leads.trailing_zeros();
                leads &= leads - 1;
                let (c, _) = U::decode(units, base + q as usize);
                let category = if c < 0x10000 {
                    categories[c as usize]
                } else {
                    astral_category(c)
                };
                let before = if after_non_ascii >> q & 1 == 1 {
                    last
                } else {
                    0
                };
                let bare = (!(after_space >> q) & 1) as usize;
                packed += INCREMENTS[(bare << 8 | usize::from(before << 4 | category)) & 0x1FF];
                last = category;
            }
            self.last_category = last;
            self.packed = packed;
        }

        self.c_letter = letter >> 63;
        self.c_lower = m.lower >> 63;
        self.c_upper = m.upper >> 63;
        self.c_digit = m.digit >> 63;
        self.c_space = m.space >> 63;
        self.c_space_start = space_start >> 63;
        self.c_newline = m.newline >> 63;
        self.c_punct = punct >> 63;
        self.c_punct_start = punct_start >> 63;
        self.c_punct_1 = punct_1 >> 63;
        self.c_non_ascii = m.non_ascii >> 63;
        self.c_tab = m.tab >> 63;
        self.c_carriage_return = m.carriage_return >> 63;
        self.c2_consonant = consonant >> 62;
        self.c2_vowel = m.vowel >> 62;
    }

    /// What the loop over the non-ASCII characters of [`Self::block`] counts, from the
    /// [`CategoryMasks`] of a block of code points whose non-ASCII units are `leads` (each a
    /// character of its own): each category's characters, and the runs each kind starts, with
    /// bit operations on the masks instead of a table lookup per character.
    #[inline(always)]
    fn count_categories(&mut self, by_category: &CategoryMasks, m: Masks, leads: u64) {
        let of = |slots: &[usize]| {
            slots.iter().fold(0, |mask, &slot| {
                mask | by_category[category_of_slot(slot) as usize]
            })
        };
        let han_kana = of(&[HAN_SINGLE, HAN_DOUBLE, HAN_OTHER, KANA]);
        let hangul = of(&[HANGUL_SINGLE, HANGUL_DOUBLE, HANGUL_OTHER]);
        let two_byte = of(&[OTHER_2BYTE, RARE_TWO_BYTE]);
        // The character before the block's first unit, where that unit is non-ASCII: the
        // last one counted.
        let last = if self.c_non_ascii == 1 {
            usize::from(self.last_category)
        } else {
            0
        };
        let kind = kind_of_category(last);
        let run_starts = |mask: u64, carry: bool| mask & !later(mask, u64::from(carry));
        let hangul_starts = run_starts(hangul, kind == 2);
        let after_space = later(m.space, self.c_space);
        let fields = &mut self.non_ascii;
        for (field, &mask) in fields.iter_mut().zip(&by_category[1..]) {
            *field += count(mask);
        }
        fields[category_of_slot(OTHER_2BYTE) as usize - 1] +=
            count(by_category[category_of_slot(RARE_TWO_BYTE) as usize]);
        fields[FIELD_HAN_KANA_RUNS as usize] += count(run_starts(han_kana, kind == 1));
        fields[FIELD_HANGUL_RUNS as usize] += count(hangul_starts);
        fields[FIELD_OTHER_2BYTE_RUNS as usize] += count(run_starts(two_byte, is_two_byte(last)));
        fields[FIELD_HANGUL_BARE_RUNS as usize] += count(hangul_starts & !after_space);
        let top = 63 - leads.leading_zeros();
        self.last_category = (1..by_category.len())
            .find(|&k| by_category[k] >> top & 1 == 1)
            .unwrap_or(0) as u8;
    }

    /// Adds the packed counts to the totals.
    fn unpack(&mut self) {
        for (k, total) in self.non_ascii.iter_mut().enumerate() {
            *total += (self.packed >> (k as u32 * FIELD_BITS)) as u64 & u64::from(PACKED_MAX);
        }
        (self.packed, self.pending) = (0, 0);
    }

    /// Closes the runs still open at the text's end and writes the derived features.
    fn finish(mut self, f: &mut Features) {
        self.unpack();
        for (k, &slot) in CATEGORY_SLOTS.iter().enumerate().skip(1) {
            f[slot] += self.non_ascii[k - 1];
        }
        f[HAN_KANA_RUNS] += self.non_ascii[FIELD_HAN_KANA_RUNS as usize];
        f[HANGUL_RUNS] += self.non_ascii[FIELD_HANGUL_RUNS as usize];
        f[HANGUL_BARE_RUNS] += self.non_ascii[FIELD_HANGUL_BARE_RUNS as usize];
        f[OTHER_2BYTE_RUNS] += self.non_ascii[FIELD_OTHER_2BYTE_RUNS as usize];
        self.digit_groups += self.digit_tail.div_ceil(3);
        if self.upper_tail >= 2 {
            self.caps_letters += self.upper_tail;
        }
        let o = &self.offsets;
        // Segments of length >= k.
        let at_least = |k: usize| o[k] - o[k + 1];
        f[SEG_LEN_1] += at_least(1) - at_least(2);
        f[SEG_LEN_1 + 1] += at_least(2) - at_least(3);
        f[SEG_LEN_1 + 2] += at_least(3) - at_least(4);
        f[SEG_LEN_1 + 3] += at_least(4) - at_least(5);
        f[SEG_LEN_5_6] += at_least(5) - at_least(7);
        f[SEG_LEN_7_8] += at_least(7) - at_least(9);
        f[SEG_LEN_9_11] += at_least(9) - at_least(12);
        f[SEG_LEN_12P] += at_least(12);
        f[SEG_LONG_EXTRA] += o[12];
        f[CAPS_LETTERS] += self.caps_letters;
        f[DIGIT_GROUPS] += self.digit_groups;
        let single_spaces = self.space_runs - self.space_long_runs;
        f[SPACE_SINGLE] += single_spaces;
        f[SPACE_RUNS] += self.space_long_runs;
        f[SPACE_RUN_CHARS] += self.space_chars - single_spaces;
        f[NEWLINE_RUNS] += self.newline_runs;
        f[NEWLINE_CHARS] += self.newline_chars;
        let punct_1 = self.punct_runs - self.punct_long_2;
        let punct_2 = self.punct_long_2 - self.punct_long_3;
        f[PUNCT_RUN_1] += punct_1;
        f[PUNCT_RUN_2] += punct_2;
        f[PUNCT_RUN_3P] += self.punct_long_3;
        f[PUNCT_EXTRA] += self.punct_chars - punct_1 - 2 * punct_2 - 2 * self.punct_long_3;
        f[PUNCT_GLUED] += self.punct_glued;
        f[HARD_LETTERS] += self.hard_letters;
        f[MIXED_WHITESPACE] += self.mixed_whitespace;
        f[CONTROL_CHARS] += self.control_chars;
    }
}

/// Counts every feature of `text` in one pass.
pub fn extract(text: &str, tables: &SingleTokenTables) -> Features {
    extract_units(text.as_bytes(), tables)
}

/// [`extract`] over UTF-8 bytes or UCS-4 code points: both give the same features.
///
/// The pass classifies 64 units at a time into bit masks (one per class) and derives the
/// run features from shifts and population counts of those masks, carrying the last bit of
/// each mask into the next block; only runs of non-ASCII characters are walked one by one.
pub fn extract_units<U: Unit>(units: &[U], tables: &SingleTokenTables) -> Features {
    extract_units_recording(units, tables, None)
}

/// What [`crate::tokens::words`] reads of a block of 64 units, recorded by the pass that
/// computes it anyway: ASCII letters, spaces, tabs and line breaks, printable ASCII
/// punctuation and symbols, non-ASCII units, the units a code point starts at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WordMasks {
    pub letters: u64,
    pub separators: u64,
    pub punctuation: u64,
    pub non_ascii: u64,
    pub starts: u64,
}

impl WordMasks {
    #[inline(always)]
    fn of(m: &Masks) -> Self {
        Self {
            letters: (m.lower | m.upper) & m.valid,
            separators: (m.space | m.newline) & m.valid,
            punctuation: m.valid & !(m.lower | m.upper | m.digit | m.space | m.newline | m.low),
            non_ascii: m.non_ascii & m.valid,
            starts: (!m.non_ascii | m.lead) & m.valid,
        }
    }
}

/// The index of the `n`-th (from 0) set bit of `x`, which has more than `n`: a byte at a time,
/// then a bit at a time within the byte.
#[inline]
pub fn nth_set_bit(x: u64, mut n: u32) -> u32 {
    let mut shift = 0;
    loop {
        let in_byte = (x >> shift & 0xFF).count_ones();
        if n < in_byte {
            break;
        }
        n -= in_byte;
        shift += 8;
    }
    let mut byte = x >> shift & 0xFF;
    for _ in 0..n {
        byte &= byte - 1;
    }
    shift + byte.trailing_zeros()
}

/// The [`WordMasks`] of every block of `units`, without the features.
pub fn word_masks<U: Unit>(units: &[U]) -> Vec<WordMasks> {
    units
        .chunks(64)
        .map(|block| match block.try_into() {
            Ok(block) => WordMasks::of(&U::masks(block)),
            Err(_) => WordMasks::of(&scalar_masks(block)),
        })
        .collect()
}

/// [`extract_units`], appending each block's [`WordMasks`] to `record` when given.
pub fn extract_units_recording<U: Unit>(
    units: &[U],
    tables: &SingleTokenTables,
    record: Option<&mut Vec<WordMasks>>,
) -> Features {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("lzcnt")
    {
        if has_avx512() {
            // SAFETY: the CPU has the features the function is compiled for (checked above).
            return unsafe { extract_units_avx512(units, tables, record) };
        }
        // SAFETY: the CPU has the features the function is compiled for (checked above).
        return unsafe { extract_units_bmi(units, tables, record) };
    }
    extract_blocks::<U, false>(units, tables, record)
}

/// [`extract_blocks`] compiled with the bit-counting instructions it leans on (a population
/// count is one instruction instead of a dozen): every x86_64 CPU since about 2013.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt,bmi1,lzcnt")]
fn extract_units_bmi<U: Unit>(
    units: &[U],
    tables: &SingleTokenTables,
    record: Option<&mut Vec<WordMasks>>,
) -> Features {
    extract_blocks::<U, false>(units, tables, record)
}

/// [`extract_units_bmi`] classifying the blocks with AVX-512 (see [`Unit::masks_avx512`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt,bmi1,lzcnt,avx512f,avx512bw")]
fn extract_units_avx512<U: Unit>(
    units: &[U],
    tables: &SingleTokenTables,
    record: Option<&mut Vec<WordMasks>>,
) -> Features {
    extract_blocks::<U, true>(units, tables, record)
}

/// The block pass; `AVX512` where the caller has checked [`has_avx512`].
#[inline(always)]
fn extract_blocks<U: Unit, const AVX512: bool>(
    units: &[U],
    tables: &SingleTokenTables,
    mut record: Option<&mut Vec<WordMasks>>,
) -> Features {
    let mut f: Features = [0; FEATURE_COUNT];
    let mut pass = Pass::default();
    let mut blocks = units.chunks_exact(64);
    let mut base = 0;
    for block in &mut blocks {
        let block: &[U; 64] = block.try_into().unwrap_or_else(|_| unreachable!());
        let m = if AVX512 {
            // SAFETY: `AVX512` only where the CPU has it.
            unsafe { U::masks_avx512(block) }
        } else {
            U::masks(block)
        };
        if let Some(record) = record.as_deref_mut() {
            record.push(WordMasks::of(&m));
        }
        pass.block::<U, AVX512>(m, units, base, tables);
        base += 64;
    }
    let rest = blocks.remainder();
    if !rest.is_empty() {
        let m = scalar_masks(rest);
        if let Some(record) = record {
            record.push(WordMasks::of(&m));
        }
        pass.block::<U, false>(m, units, base, tables);
    }
    pass.finish(&mut f);
    f
}

/// Texts shorter than this many units are counted on the calling thread alone: below it,
/// waking a second thread costs about what it saves.
pub const PARALLEL_MIN_UNITS: usize = 192 * 1024;

/// How far past a piece's nominal end to look for a place to cut before giving up on it.
const CUT_WINDOW: usize = 64 * 1024;

/// Whether the runs of the pass end between `units[i - 1]` and `units[i]` with no feature
/// looking across: a space or newline followed by an ASCII unit of another class other than a
/// tab. (A letter after punctuation is looked across, so is a tab after a newline, and
/// non-ASCII runs span several UTF-8 bytes.)
#[inline]
fn clean_cut<U: Unit>(units: &[U], i: usize) -> bool {
    let (a, b) = (units[i - 1].value(), units[i].value());
    matches!(a, 0x20 | 0x0A) && b < 0x80 && b != 0x09 && class(a) != class(b)
}

/// [`extract_units`] over `pieces` pieces of about equal size cut where no run crosses, on
/// rayon's pool; the same features as one pass (each feature is a sum over runs).
pub fn extract_units_parallel<U: Unit + Sync>(
    units: &[U],
    tables: &SingleTokenTables,
    pieces: usize,
) -> Features {
    let step = units.len() / pieces.max(1);
    let mut cuts = vec![0];
    for k in 1..pieces {
        let from = (k * step).max(cuts[cuts.len() - 1] + 1);
        let to = (from + CUT_WINDOW).min(units.len());
        if let Some(cut) = (from..to).find(|&i| clean_cut(units, i)) {
            cuts.push(cut);
        }
    }
    cuts.push(units.len());
    if cuts.len() == 2 {
        return extract_units(units, tables);
    }
    use rayon::prelude::*;
    cuts.par_windows(2)
        .map(|w| extract_units(&units[w[0]..w[1]], tables))
        .reduce(
            || [0; FEATURE_COUNT],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x += y;
                }
                a
            },
        )
}

/// The features of `units`, on several threads when the text is long enough to gain.
pub fn extract_any<U: Unit + Sync>(units: &[U], tables: &SingleTokenTables) -> Features {
    let threads = rayon::current_num_threads();
    if units.len() < PARALLEL_MIN_UNITS || threads < 2 {
        return extract_units(units, tables);
    }
    // A few pieces per thread, so that a thread slowed by other work does not hold back the
    // result, each still long enough to dwarf the cost of handing it out.
    let pieces = (units.len() / (PARALLEL_MIN_UNITS / 2)).min(4 * threads);
    extract_units_parallel(units, tables, pieces)
}

/// The one-unit-at-a-time pass the block pass replaced, kept as the oracle of the tests.
#[cfg(test)]
mod scalar {
    use super::*;

    #[inline]
    fn is_letter(v: u32) -> bool {
        (v | 0x20).wrapping_sub(b'a' as u32) < 26
    }

    #[inline]
    fn is_lower(v: u32) -> bool {
        v.wrapping_sub(b'a' as u32) < 26
    }

    #[inline]
    fn is_upper(v: u32) -> bool {
        v.wrapping_sub(b'A' as u32) < 26
    }

    #[inline]
    fn is_digit(v: u32) -> bool {
        v.wrapping_sub(b'0' as u32) < 10
    }

    /// Feature slot of a letter segment by its length (index 0 unused, 12 means 12+).
    const SEGMENT_SLOT: [usize; 13] = [
        SEG_LEN_1,
        SEG_LEN_1,
        SEG_LEN_1 + 1,
        SEG_LEN_1 + 2,
        SEG_LEN_1 + 3,
        SEG_LEN_5_6,
        SEG_LEN_5_6,
        SEG_LEN_7_8,
        SEG_LEN_7_8,
        SEG_LEN_9_11,
        SEG_LEN_9_11,
        SEG_LEN_9_11,
        SEG_LEN_12P,
    ];

    #[inline]
    fn letter_segment(f: &mut Features, len: usize, all_caps: bool) {
        f[SEGMENT_SLOT[len.min(12)]] += 1;
        f[SEG_LONG_EXTRA] += len.saturating_sub(11) as u64;
        f[CAPS_LETTERS] += if all_caps && len >= 2 { len as u64 } else { 0 };
    }

    /// Counts the letter run starting at `i` (`units[i]` is a letter); returns its end.
    #[inline]
    fn letter_run<U: Unit>(f: &mut Features, units: &[U], i: usize) -> usize {
        let n = units.len();
        let first = units[i].value();
        // Fast scan: most runs are lower-case words, possibly capitalised, with no case change to
        // split at, so only the run's end and whether any later letter is upper-case matter here.
        let mut j = i + 1;
        let mut later_upper = false;
        while j < n {
            let c = units[j].value();
            if !is_letter(c) {
                break;
            }
            later_upper |= is_upper(c);
            j += 1;
        }
        if !later_upper {
            // One segment; a capital first letter followed by lower-case ones is not all-caps.
            letter_segment(f, j - i, false);
            return j;
        }
        let end = j;
        let mut start = i;
        let mut has_lower = is_lower(first);
        let mut prev = first;
        for (k, unit) in units.iter().enumerate().take(end).skip(i + 1) {
            let c = unit.value();
            // o200k cuts a letter run where a lower-case letter meets an upper-case one.
            if is_upper(c) && is_lower(prev) {
                letter_segment(f, k - start, !has_lower);
                start = k;
                has_lower = false;
            }
            has_lower |= is_lower(c);
            prev = c;
        }
        letter_segment(f, end - start, !has_lower);
        end
    }

    /// Counts a run of words separated by single spaces, starting with a letter at `i`: the shape
    /// of prose, kept in one loop so the class dispatch runs once per phrase, not per word.
    #[inline]
    fn words<U: Unit>(f: &mut Features, units: &[U], i: usize) -> usize {
        let n = units.len();
        let mut j = letter_run(f, units, i);
        while j + 1 < n && units[j].value() == 0x20 && is_letter(units[j + 1].value()) {
            f[SPACE_SINGLE] += 1;
            j = letter_run(f, units, j + 1);
        }
        j
    }

    /// [`extract`] over UTF-8 bytes or UCS-4 code points: both give the same features.
    pub fn extract_units<U: Unit>(units: &[U], tables: &SingleTokenTables) -> Features {
        let n = units.len();
        let at = |k: usize| units[k].value();
        let mut f: Features = [0; FEATURE_COUNT];
        // End offset of the last 2-byte "other" character, to count runs of them (words in
        // Cyrillic, Greek, accented Latin...).
        let mut other_2byte_end = usize::MAX;
        let mut i = 0;
        while i < n {
            let v = at(i);
            let mut j = i + 1;
            match class(v) {
                LOWER | UPPER => j = words(&mut f, units, i),
                DIGIT => {
                    while j < n && is_digit(at(j)) {
                        j += 1;
                    }
                    f[DIGIT_GROUPS] += (j - i).div_ceil(3) as u64;
                }
                SPACE => {
                    while j < n && matches!(at(j), 0x20 | 0x09) {
                        j += 1;
                    }
                    if j - i == 1 {
                        f[SPACE_SINGLE] += 1;
                        // The common case, a word after its space, without a trip through the
                        // dispatch (whose branch the alternation of classes keeps mispredicting).
                        if j < n && is_letter(at(j)) {
                            j = words(&mut f, units, j);
                        }
                    } else {
                        f[SPACE_RUNS] += 1;
                        f[SPACE_RUN_CHARS] += (j - i) as u64;
                    }
                }
                NEWLINE => {
                    while j < n && matches!(at(j), 0x0A | 0x0D) {
                        j += 1;
                    }
                    f[NEWLINE_RUNS] += 1;
                    f[NEWLINE_CHARS] += (j - i) as u64;
                }
                PUNCT => {
                    while j < n && class(at(j)) == PUNCT {
                        j += 1;
                    }
                    match j - i {
                        1 => {
                            f[PUNCT_RUN_1] += 1;
                            if j < n && is_letter(at(j)) {
                                f[PUNCT_GLUED] += 1;
                            }
                        }
                        2 => f[PUNCT_RUN_2] += 1,
                        len => {
                            f[PUNCT_RUN_3P] += 1;
                            f[PUNCT_EXTRA] += (len - 2) as u64;
                        }
                    }
                }
                _ => {
                    // A run of non-ASCII characters. The frequent classes are counted in locals
                    // (registers): incrementing one array slot per character would chain every
                    // add on the previous store.
                    let (mut han, mut han_single, mut han_double) = (0u64, 0u64, 0u64);
                    let (mut hangul, mut hangul_single, mut hangul_double) = (0u64, 0u64, 0u64);
                    let mut kana = 0u64;
                    // 1 inside ideographs/kana, 2 inside hangul, 0 elsewhere: counts CJK "words".
                    let (mut kind, mut han_runs, mut hangul_runs) = (0u8, 0u64, 0u64);
                    let mut hangul_bare_runs = 0u64;
                    let after_space = i > 0 && matches!(at(i - 1), 0x20 | 0x09);
                    let mut k = i;
                    while k < n && at(k) >= 0x80 {
                        let (c, len) = U::decode(units, k);
                        k += len;
                        let now = if c.wrapping_sub(HAN_FIRST) <= HAN_LAST - HAN_FIRST {
                            han += 1;
                            han_single += bit(tables.han_single, c - HAN_FIRST);
                            han_double += bit(tables.han_double, c - HAN_FIRST);
                            1
                        } else if c.wrapping_sub(HANGUL_FIRST) <= HANGUL_LAST - HANGUL_FIRST {
                            hangul += 1;
                            hangul_single += bit(tables.hangul_single, c - HANGUL_FIRST);
                            hangul_double += bit(tables.hangul_double, c - HANGUL_FIRST);
                            2
                        } else if c.wrapping_sub(0x3040) <= 0x30FF - 0x3040 {
                            kana += 1;
                            1
                        } else {
                            let slot = non_ascii_slot(c, tables);
                            f[slot] += 1;
                            if slot == OTHER_2BYTE {
                                if other_2byte_end != k - len {
                                    f[OTHER_2BYTE_RUNS] += 1;
                                }
                                other_2byte_end = k;
                                if !in_bitset(tables.two_byte_single, c - 0x80) {
                                    f[RARE_TWO_BYTE] += 1;
                                }
                            }
                            match slot {
                                HAN_SINGLE | HAN_DOUBLE | HAN_OTHER | KANA => 1,
                                HANGUL_SINGLE | HANGUL_DOUBLE | HANGUL_OTHER => 2,
                                _ => 0,
                            }
                        };
                        han_runs += u64::from(now == 1 && kind != 1);
                        let hangul_start = now == 2 && kind != 2;
                        hangul_runs += u64::from(hangul_start);
                        hangul_bare_runs +=
                            u64::from(hangul_start && !(k - len == i && after_space));
                        kind = now;
                    }
                    f[HAN_KANA_RUNS] += han_runs;
                    f[HANGUL_RUNS] += hangul_runs;
                    f[HANGUL_BARE_RUNS] += hangul_bare_runs;
                    f[HAN_SINGLE] += han_single;
                    f[HAN_DOUBLE] += han_double;
                    f[HAN_OTHER] += han - han_single - han_double;
                    f[HANGUL_SINGLE] += hangul_single;
                    f[HANGUL_DOUBLE] += hangul_double;
                    f[HANGUL_OTHER] += hangul - hangul_single - hangul_double;
                    f[KANA] += kana;
                    j = k;
                }
            }
            i = j;
        }
        guard_features(&mut f, units);
        f
    }

    /// The guard's features, one unit at a time (non-ASCII units end every run).
    fn guard_features<U: Unit>(f: &mut Features, units: &[U]) {
        let (mut letters, mut kind) = (0, false);
        let mut previous = u32::MAX;
        for unit in units {
            let v = unit.value();
            let vowel = v < 0x80 && b"aeiouyAEIOUY".contains(&(v as u8));
            if is_letter(v) {
                letters = if letters > 0 && kind == vowel {
                    letters + 1
                } else {
                    1
                };
                kind = vowel;
                f[HARD_LETTERS] += u64::from(letters >= 3);
            } else {
                letters = 0;
            }
            f[MIXED_WHITESPACE] += u64::from(match v {
                0x09 => !matches!(previous, 0x09 | 0x0A | 0x0D),
                0x20 => previous == 0x09,
                _ => false,
            });
            if (v < 0x20 && !matches!(v, 0x09 | 0x0A | 0x0D)) || v == 0x7F {
                f[CONTROL_CHARS] += 1;
            }
            if v == 0x0D && previous == 0x0D {
                f[CONTROL_CHARS] += 1;
            }
            previous = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::coefficients::{
        O200K_HANGUL_DOUBLE, O200K_HANGUL_SINGLE, O200K_HAN_DOUBLE, O200K_HAN_SINGLE,
        O200K_TWO_BYTE_SINGLE,
    };
    use super::*;

    fn o200k() -> SingleTokenTables {
        static CATEGORIES: OnceLock<Box<[u8; 0x10000]>> = OnceLock::new();
        SingleTokenTables {
            han_single: &O200K_HAN_SINGLE,
            han_double: &O200K_HAN_DOUBLE,
            hangul_single: &O200K_HANGUL_SINGLE,
            hangul_double: &O200K_HANGUL_DOUBLE,
            two_byte_single: &O200K_TWO_BYTE_SINGLE,
            categories: &CATEGORIES,
        }
    }

    fn feats(text: &str) -> Features {
        extract(text, &o200k())
    }

    /// Pieces the random texts are made of: every class, runs shorter and longer than a block.
    const PIECES: &[&str] = &[
        "a",
        "Z",
        "word",
        "Word",
        "camelCase",
        "HTTP",
        "XMLHttpRequest",
        "I",
        "aB",
        "ABc",
        "0",
        "42",
        "1234567",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\n\n\n",
        ".",
        "()",
        "...",
        "{\"",
        "\u{1}",
        "\u{7f}",
        "é",
        "привет",
        "你",
        "東京",
        "カナ",
        "한국어",
        "。",
        "😀",
        "\u{ff70}",
        "\u{3400}",
    ];

    fn random_text(seed: &mut u64) -> String {
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        let pieces = next() % 80;
        let mut text = String::new();
        for _ in 0..pieces {
            let piece = PIECES[(next() % PIECES.len() as u64) as usize];
            // Mostly once, sometimes long enough to cross one or more 64-unit blocks.
            let times = match next() % 10 {
                0 => 1 + next() % 150,
                1 => 2 + next() % 8,
                _ => 1,
            };
            for _ in 0..times {
                text.push_str(piece);
            }
        }
        text
    }

    #[test]
    fn block_pass_matches_the_scalar_pass() {
        let tables = o200k();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            let text = random_text(&mut seed);
            let units: Vec<u32> = text.chars().map(u32::from).collect();
            let expected = scalar::extract_units(text.as_bytes(), &tables);
            assert_eq!(
                scalar::extract_units(&units, &tables),
                expected,
                "scalar {text:?}"
            );
            assert_eq!(extract(&text, &tables), expected, "utf-8 {text:?}");
            assert_eq!(extract_units(&units, &tables), expected, "ucs-4 {text:?}");
        }
    }

    #[test]
    fn parallel_pass_matches_one_pass() {
        let tables = o200k();
        let mut seed = 0x1234_5678_9ABC_DEF1u64;
        for _ in 0..100 {
            let mut text = String::new();
            for _ in 0..(seed % 40) {
                text.push_str(&random_text(&mut seed));
            }
            let units: Vec<u32> = text.chars().map(u32::from).collect();
            let expected = extract(&text, &tables);
            for pieces in [2, 3, 7, 64] {
                assert_eq!(
                    extract_units_parallel(text.as_bytes(), &tables, pieces),
                    expected
                );
                assert_eq!(extract_units_parallel(&units, &tables, pieces), expected);
            }
        }
        // Long enough for `extract_any` to split, and no place to cut at all.
        let text = random_text(&mut seed).repeat(PARALLEL_MIN_UNITS / 100);
        assert_eq!(
            extract_any(text.as_bytes(), &tables),
            extract(&text, &tables)
        );
        let text = "x".repeat(PARALLEL_MIN_UNITS * 2);
        assert_eq!(
            extract_any(text.as_bytes(), &tables),
            extract(&text, &tables)
        );
    }

    #[test]
    fn vector_masks_match_scalar_masks() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2_000 {
            let text = random_text(&mut seed);
            let units: Vec<u32> = text.chars().map(u32::from).collect();
            for block in text.as_bytes().chunks_exact(64) {
                let block: &[u8; 64] = block.try_into().unwrap();
                assert_eq!(u8::masks(block), scalar_masks(block));
            }
            for block in units.chunks_exact(64) {
                let block: &[u32; 64] = block.try_into().unwrap();
                assert_eq!(u32::masks(block), scalar_masks(block));
            }
            if has_avx512() {
                for block in text.as_bytes().chunks_exact(64) {
                    let block: &[u8; 64] = block.try_into().unwrap();
                    // SAFETY: the CPU has AVX-512 F and BW (checked above).
                    assert_eq!(unsafe { u8::masks_avx512(block) }, scalar_masks(block));
                }
                for block in units.chunks_exact(64) {
                    let block: &[u32; 64] = block.try_into().unwrap();
                    // SAFETY: as above.
                    assert_eq!(unsafe { u32::masks_avx512(block) }, scalar_masks(block));
                }
            }
        }
        let odd: Vec<u32> = (0..64)
            .map(|k| [0x8000_0000, u32::MAX, 0x10_FFFF, 0x7F, 0x80, 0xFF][k % 6])
            .collect();
        let odd: &[u32; 64] = odd.as_slice().try_into().unwrap();
        assert_eq!(u32::masks(odd), scalar_masks(odd));
        if has_avx512() {
            // SAFETY: the CPU has AVX-512 F and BW (checked above).
            assert_eq!(unsafe { u32::masks_avx512(odd) }, scalar_masks(odd));
        }
    }

    #[test]
    fn vector_categories_match_the_table() {
        if !has_avx512() {
            return;
        }
        let tables = o200k();
        let categories = tables.categories();
        let mut seed = 0x5851_F42D_4C95_7F2Du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // Code points of every range (BMP ends, surrogates, astral ideographs, past U+10FFFF),
        // some ASCII among them, and random sets of lanes.
        let picks = [
            0x41, 0x80, 0xE9, 0x3B1, 0x3042, 0x4E00, 0xAC00, 0xD800, 0xFFFD, 0xFFFF,
        ];
        for _ in 0..5_000 {
            let block: Vec<u32> = (0..64)
                .map(|_| match next() % 4 {
                    0 => picks[(next() % picks.len() as u64) as usize],
                    1 => (next() % 0x10000) as u32,
                    2 => (next() % 0x11_0000) as u32,
                    _ => [0x2_0000, 0x2_FFFF, 0x3_0000, 0x1F600, u32::MAX][(next() % 5) as usize],
                })
                .collect();
            let block: &[u32; 64] = block.as_slice().try_into().unwrap();
            let leads = next() | next();
            let mut expected = [0u64; 13];
            for (q, &c) in block.iter().enumerate() {
                if leads >> q & 1 == 1 {
                    let category = if c < 0x10000 {
                        categories[c as usize]
                    } else {
                        astral_category(c)
                    };
                    expected[usize::from(category)] |= 1 << q;
                }
            }
            expected[0] = 0;
            // SAFETY: the CPU has AVX-512 F and BW (checked above).
            let got = unsafe { u32::category_masks_avx512(block, leads, categories) };
            assert_eq!(got, Some(expected), "{block:x?} {leads:x}");
        }
    }

    #[test]
    fn cjk_blocks_count_the_same_with_and_without_vectors() {
        // Long runs of each kind of non-ASCII character, so that whole blocks take the vector
        // path, with runs crossing block ends and kinds changing inside a block.
        let tables = o200k();
        let pieces = [
            "東京都の",
            "한국어 ",
            "서울",
            "データ",
            "\u{3000}",
            "naïve",
            "Ωμέγα",
            "\u{20000}",
            "😀",
            "\u{301}",
            " ",
            "\t",
            "x",
            "é ",
        ];
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..2_000 {
            let mut text = String::new();
            for _ in 0..(seed % 60) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let piece = pieces[(seed % pieces.len() as u64) as usize];
                text.push_str(&piece.repeat(1 + (seed >> 20) as usize % 30));
            }
            let units: Vec<u32> = text.chars().map(u32::from).collect();
            let expected = scalar::extract_units(text.as_bytes(), &tables);
            assert_eq!(extract_units(&units, &tables), expected, "{text:?}");
            assert_eq!(extract(&text, &tables), expected, "{text:?}");
        }
    }

    #[test]
    fn empty_text_has_no_features() {
        assert_eq!(feats(""), [0; FEATURE_COUNT]);
    }

    #[test]
    fn camel_case_splits_and_caps_count() {
        let f = feats("camelCase HTTP");
        assert_eq!(f[SEG_LEN_5_6], 1); // camel
        assert_eq!(f[SEG_LEN_1 + 3], 2); // Case, HTTP
        assert_eq!(f[CAPS_LETTERS], 4);
        assert_eq!(f[SPACE_SINGLE], 1);
    }

    #[test]
    fn digits_punct_whitespace() {
        let f = feats("1234567 {\"a\": 1}\n\n    x");
        assert_eq!(f[DIGIT_GROUPS], 3 + 1);
        assert_eq!(f[PUNCT_RUN_1], 1); // `}`
        assert_eq!(f[PUNCT_RUN_2], 2); // `{"`, `":`
        assert_eq!(f[PUNCT_GLUED], 0);
        assert_eq!(feats("self.value")[PUNCT_GLUED], 1);
        assert_eq!(f[NEWLINE_RUNS], 1);
        assert_eq!(f[NEWLINE_CHARS], 2);
        assert_eq!(f[SPACE_RUNS], 1);
        assert_eq!(f[SPACE_RUN_CHARS], 4);
    }

    #[test]
    fn non_ascii_classes() {
        let f = feats("你好。カナ한국어 éè привет 😀");
        assert_eq!(f[HAN_SINGLE] + f[HAN_DOUBLE] + f[HAN_OTHER], 2);
        assert_eq!(f[CJK_PUNCT], 1);
        assert_eq!(f[KANA], 2);
        assert_eq!(f[HANGUL_SINGLE] + f[HANGUL_DOUBLE] + f[HANGUL_OTHER], 3);
        assert_eq!(f[HAN_KANA_RUNS], 2);
        assert_eq!(f[HANGUL_RUNS], 1);
        assert_eq!(f[HANGUL_BARE_RUNS], 1); // after the katakana
        assert_eq!(f[OTHER_2BYTE], 8);
        assert_eq!(f[OTHER_2BYTE_RUNS], 2);
        assert_eq!(f[FOUR_BYTE], 1);
        let words = feats("한국어 (한국어) 한국어\n한국어");
        assert_eq!(words[HANGUL_RUNS], 4);
        assert_eq!(words[HANGUL_BARE_RUNS], 3); // at the start, after `(`, after the newline
    }
}
