//! The estimator's single pass over the text.
//!
//! Each feature approximates one way the o200k/cl100k pre-tokenisers cut text (a word, a digit
//! group, a punctuation run, a whitespace run, a CJK character...), so a linear model over them
//! tracks the exact count. The order is the one `tests/reference_tokens.py` (the pure-Python
//! reference the calibrator fits on) uses; the property tests check both agree.

use super::coefficients::{FEATURE_COUNT, HANGUL_FIRST, HANGUL_LAST, HAN_FIRST, HAN_LAST};

const SEG_LEN_1: usize = 0; // 1..=4 use indices 0..=3
const SEG_LEN_5_6: usize = 4;
const SEG_LEN_7_8: usize = 5;
const SEG_LEN_9_11: usize = 6;
const SEG_LEN_12P: usize = 7;
const SEG_LONG_EXTRA: usize = 8;
const CAPS_LETTERS: usize = 9;
const DIGIT_GROUPS: usize = 10;
const PUNCT_RUN_1: usize = 11;
const PUNCT_RUN_2: usize = 12;
const PUNCT_RUN_3P: usize = 13;
const PUNCT_EXTRA: usize = 14;
const PUNCT_GLUED: usize = 15;
const SPACE_SINGLE: usize = 16;
const SPACE_RUNS: usize = 17;
const SPACE_RUN_CHARS: usize = 18;
const NEWLINE_RUNS: usize = 19;
const NEWLINE_CHARS: usize = 20;
const HAN_SINGLE: usize = 21;
const HAN_OTHER: usize = 22;
const KANA: usize = 23;
const HANGUL_SINGLE: usize = 24;
const HANGUL_OTHER: usize = 25;
const CJK_PUNCT: usize = 26;
const OTHER_2BYTE: usize = 27;
const OTHER_2BYTE_RUNS: usize = 28;
const OTHER_3BYTE: usize = 29;
const FOUR_BYTE: usize = 30;
const HAN_KANA_RUNS: usize = 31;
const HANGUL_RUNS: usize = 32;
const HAN_DOUBLE: usize = 33;
const HANGUL_DOUBLE: usize = 34;

/// Feature counts of one text.
pub type Features = [u64; FEATURE_COUNT];

/// Per-family bitsets: which ideographs / hangul syllables are one (`*_single`) or two
/// (`*_double`) tokens on their own.
pub struct SingleTokenTables {
    pub han_single: &'static [u64],
    pub han_double: &'static [u64],
    pub hangul_single: &'static [u64],
    pub hangul_double: &'static [u64],
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

/// Counts every feature of `text` in one pass.
pub fn extract(text: &str, tables: &SingleTokenTables) -> Features {
    extract_units(text.as_bytes(), tables)
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
                        }
                        match slot {
                            HAN_SINGLE | HAN_DOUBLE | HAN_OTHER | KANA => 1,
                            HANGUL_SINGLE | HANGUL_DOUBLE | HANGUL_OTHER => 2,
                            _ => 0,
                        }
                    };
                    han_runs += u64::from(now == 1 && kind != 1);
                    hangul_runs += u64::from(now == 2 && kind != 2);
                    kind = now;
                }
                f[HAN_KANA_RUNS] += han_runs;
                f[HANGUL_RUNS] += hangul_runs;
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
    f
}

#[cfg(test)]
mod tests {
    use super::super::coefficients::{
        O200K_HANGUL_DOUBLE, O200K_HANGUL_SINGLE, O200K_HAN_DOUBLE, O200K_HAN_SINGLE,
    };
    use super::*;

    fn feats(text: &str) -> Features {
        extract(
            text,
            &SingleTokenTables {
                han_single: &O200K_HAN_SINGLE,
                han_double: &O200K_HAN_DOUBLE,
                hangul_single: &O200K_HANGUL_SINGLE,
                hangul_double: &O200K_HANGUL_DOUBLE,
            },
        )
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
        assert_eq!(f[OTHER_2BYTE], 8);
        assert_eq!(f[OTHER_2BYTE_RUNS], 2);
        assert_eq!(f[FOUR_BYTE], 1);
    }
}
