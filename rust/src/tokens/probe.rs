//! A sample of a chunk counted exactly, where its features leave the model in doubt.
//!
//! Mixtures interleaved a few characters at a time (short words of random Greek, Cyrillic,
//! Hebrew or Arabic letters, random kana cut into pieces, letters with diacritics between
//! digits) have parts that are each a little under their count, and none is enough to tip its
//! own check. Where some check comes near its threshold, a few short windows of the chunk are
//! counted exactly, and the chunk is counted whole when they say it holds many more or many
//! fewer tokens than the model's value. A window costs about its length in exact counting, so
//! the sample is a small share of the chunk, and only the chunks in doubt pay for it. Where
//! characters change script between letters every few characters is read from a sample of
//! pairs, which costs next to nothing.

use super::count::count_units;
use super::features::{nth_set_bit, Unit, WordMasks};
use super::kana::code_point;
use super::models::Encoding;

/// Windows counted exactly, evenly spaced: window `k` is centred on code point
/// `(2k + 1) * chars / 8` of the chunk.
pub const PROBE_WINDOWS: usize = 4;

/// Code points per window: long enough that the token a cut splits in two adds little,
/// short enough that the sample costs a fraction of the chunk's exact count.
pub const PROBE_CHARS: usize = 32;

/// Chunks shorter than the sample are counted exactly when in doubt: the sample would be the
/// whole chunk.
pub const PROBE_MIN_CHARS: usize = PROBE_WINDOWS * PROBE_CHARS;

/// A chunk is counted exactly once its sample, scaled to the chunk's length, holds more than
/// this many times the model's value, or less than the value over it. The mixtures the model
/// misjudges read about their true ratio, 1.7 to 3.4; ordinary chunks read about 1 (a
/// window's cut words add a little), and the few of the test corpus that read past 1.5 cost
/// an exact count, not accuracy.
pub const PROBE_RATIO: f64 = 1.5;

/// Where the model is in doubt: unknown words near their threshold, with random letters (third
/// in a row of consonants or of vowels) more than this share of the value, where unknown
/// words past half of it count the chunk exactly ...
pub const PROBE_WORDS_SHARE: f64 = 0.35;

/// ... or, next to 2-byte characters that carry more than the whole value, more than this
/// share (2-byte letters of random words take a token or more each) ...
pub const PROBE_WORDS_SHARE_TWO_BYTE: f64 = 0.1;

/// ... kana cut as random kana are, for more than this share of the value (0.85 counts the
/// chunk exactly) ...
pub const PROBE_KANA_SHARE: f64 = 0.5;

/// ... or kana for more than that share, of which the sampled pairs find fewer than
/// [`super::kana::KANA_MIN_PAIRS`], in a chunk shorter than this (which only a short text has:
/// longer ones are cut into chunks of at least 512 code points) ...
pub const PROBE_FEW_PAIRS_CHARS: usize = 512;

/// ... or random letters (third in a row of consonants or of vowels) for more than this share
/// (0.4 counts the chunk exactly) ...
pub const PROBE_HARD_SHARE: f64 = 0.2;

/// ... or mixed whitespace (a tab after neither a tab nor a line break, a space after a tab)
/// for more than this share (0.25 counts the chunk exactly): whitespace mixed with control
/// characters, beside runs of punctuation, takes up to twice the model's value with no check
/// past its threshold.
pub const PROBE_WHITESPACE_SHARE: f64 = 0.125;

/// ... or, where characters past ASCII carry more than [`PROBE_SCRIPT_SHARE`] of the value,
/// at least this many of the [`SCRIPT_SAMPLES`] pairs of characters sampled change script
/// between two letters or are a digit and a letter (a cut between tokens at each; of the test
/// corpus's 2,270 chunks, 15 meet 2 to 4, CJK text with Latin words, the others fewer).
pub const SCRIPT_CHANGES_MIN: usize = 2;

/// Code points sampled for changes of script, evenly spaced: at code point `k * chars /`
/// `SCRIPT_SAMPLES` for every `k` below it, the character and the one after it.
pub const SCRIPT_SAMPLES: usize = 32;

/// See [`SCRIPT_CHANGES_MIN`].
pub const PROBE_SCRIPT_SHARE: f64 = 0.1;

/// The unit indices the code points `targets` (ascending) start at, written to `offsets`
/// (as long as `targets`), read from the blocks' [`WordMasks`] without decoding the units
/// between them (UCS-4 units are the code points themselves); `len` for one past the end.
fn unit_offsets<U: Unit>(
    masks: &[WordMasks],
    targets: &[usize],
    len: usize,
    offsets: &mut [usize],
) {
    if size_of::<U>() != 1 {
        // One unit per code point.
        for (offset, &t) in offsets.iter_mut().zip(targets) {
            *offset = t.min(len);
        }
        return;
    }
    let mut found = 0;
    let mut before = 0;
    for (b, m) in masks.iter().enumerate() {
        let count = m.starts.count_ones() as usize;
        while found < targets.len() && targets[found] < before + count {
            let bit = nth_set_bit(m.starts, (targets[found] - before) as u32);
            offsets[found] = 64 * b + bit as usize;
            found += 1;
        }
        before += count;
    }
    offsets[found..].fill(len);
}

/// The script of a letter or digit: 1 for Latin (ASCII letters and U+00C0..=U+02AF but `×`
/// and `÷`), 2 for digits, a number of its own for Greek, Cyrillic, Armenian, Hebrew, Arabic
/// and the other 2-byte alphabets, one for ideographs and kana (Japanese mixes them), one for
/// hangul, one per 256 code points for the other scripts; 0 for whitespace, punctuation,
/// combining marks, symbols, emoji and other characters that are no letter of a script.
#[inline]
fn script(c: u32) -> u32 {
    // A table for the BMP, where the sampled characters of the chunks are, rather than range
    // checks: the pairs of a chunk alternate between Latin, CJK and punctuation, and each
    // check that took the other branch than before cost a misprediction.
    match SCRIPTS_BMP.get(c as usize) {
        Some(&PER_256) => 0x100 + (c >> 8),
        Some(&s) => u32::from(s),
        None => script_of(c),
    }
}

/// In [`SCRIPTS_BMP`], the scripts numbered by their block of 256 code points.
const PER_256: u8 = u8::MAX;

/// [`script`] of the BMP's code points, [`PER_256`] for those numbered by their block.
static SCRIPTS_BMP: [u8; 0x10000] = {
    let mut table = [0u8; 0x10000];
    let mut c = 0;
    while c < 0x10000 {
        let s = script_of(c as u32);
        table[c] = if s >= 0x100 { PER_256 } else { s as u8 };
        c += 1;
    }
    table
};

/// [`script`], by ranges.
const fn script_of(c: u32) -> u32 {
    match c {
        0x30..=0x39 => 2,
        0x41..=0x5A | 0x61..=0x7A => 1,
        0..=0xBF | 0xD7 | 0xF7 => 0,
        0xC0..=0x2AF => 1,
        0x2B0..=0x36F => 0,
        0x370..=0x3FF => 3,
        0x400..=0x52F => 4,
        0x530..=0x58F => 5,
        0x590..=0x5FF => 6,
        0x600..=0x6FF | 0x750..=0x77F => 7,
        0x700..=0x7FF => 8 + ((c - 0x700) >> 6),
        0x3040..=0x30FF
        | 0x31F0..=0x31FF
        | 0xFF66..=0xFF9F
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xF900..=0xFAFF
        | 0x20000..=0x2FFFF => 20,
        0xAC00..=0xD7A3 | 0x1100..=0x11FF | 0x3130..=0x318F => 21,
        0x2000..=0x2BFF
        | 0x3000..=0x303F
        | 0xFE00..=0xFE0F
        | 0xFF00..=0xFF65
        | 0x1F000..=0x1FFFF
        | 0xE0000.. => 0,
        _ => 0x100 + (c >> 8),
    }
}

/// Of the pairs of characters at code points `k * chars /` [`SCRIPT_SAMPLES`] of a chunk
/// (`units`, its blocks' `masks`), how many are two letters of different scripts or a digit
/// and a letter (an ASCII letter next to a digit aside: `utf8`, `x86`).
pub fn sampled_script_changes<U: Unit>(units: &[U], masks: &[WordMasks], chars: usize) -> usize {
    let targets: [usize; SCRIPT_SAMPLES] = std::array::from_fn(|k| k * chars / SCRIPT_SAMPLES);
    let mut offsets = [0; SCRIPT_SAMPLES];
    unit_offsets::<U>(masks, &targets, units.len(), &mut offsets);
    let mut changes = 0;
    for i in offsets {
        if i >= units.len() {
            continue;
        }
        let (first, next) = code_point(units, i);
        if next >= units.len() {
            continue;
        }
        let second = code_point(units, next).0;
        let (a, b) = (script(first), script(second));
        let ascii_word = a + b == 3 && (first | second) < 0x80;
        changes += usize::from(a != 0 && b != 0 && a != b && !ascii_word);
    }
    changes
}

/// The exact tokens of windows `ks` (see [`PROBE_WINDOWS`]) of a chunk of `chars` (at least
/// [`PROBE_MIN_CHARS`]) code points, `units`, whose blocks' masks are `masks`.
fn window_tokens<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    chars: usize,
    ks: &[usize],
    encoding: Encoding,
) -> usize {
    let mut targets = [0; 2 * PROBE_WINDOWS];
    for (pair, &k) in targets.chunks_mut(2).zip(ks) {
        let start = (2 * k + 1) * chars / (2 * PROBE_WINDOWS) - PROBE_CHARS / 2;
        pair.copy_from_slice(&[start, start + PROBE_CHARS]);
    }
    let targets = &targets[..2 * ks.len()];
    let mut offsets = [0; 2 * PROBE_WINDOWS];
    let offsets = &mut offsets[..targets.len()];
    unit_offsets::<U>(masks, targets, units.len(), offsets);
    offsets
        .chunks(2)
        .map(|w| count_units(&units[w[0]..w[1]], encoding))
        .sum()
}

/// The exact tokens of the [`PROBE_WINDOWS`] windows of a chunk of `chars` (at least
/// [`PROBE_MIN_CHARS`]) code points, `units`, whose blocks' masks are `masks`.
pub fn probe_tokens<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    chars: usize,
    encoding: Encoding,
) -> usize {
    let ks: Vec<usize> = (0..PROBE_WINDOWS).collect();
    window_tokens(units, masks, chars, &ks, encoding)
}

/// The windows counted first, every other one; the rest are counted only where these read
/// the chunk's density further than [`PROBE_AGREE`] from the model's value.
pub const FIRST_WINDOWS: [usize; 2] = [0, 2];

/// The windows counted where the first ones do not settle it.
pub const LATER_WINDOWS: [usize; 2] = [1, 3];

/// Where the first windows, scaled to the chunk's length, hold at most this many times the
/// model's value and at least the value over it, the chunk keeps the value without the other
/// windows: for the sample to disagree by [`PROBE_RATIO`], the windows left out would have to
/// read 1.8 times the value or more, a chunk whose parts differ that much. Ordinary chunks
/// mostly read within it.
pub const PROBE_AGREE: f64 = 1.2;

/// Whether the sample of a chunk of `chars` code points with model value `value` says the
/// chunk holds more than [`PROBE_RATIO`] times the value, or less than the value over it
/// (then it is counted exactly). Chunks shorter than [`PROBE_MIN_CHARS`] always are. Half the
/// windows are counted first, and the others only where those do not read about the value.
pub fn sample_disagrees<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    chars: usize,
    value: f64,
    encoding: Encoding,
) -> bool {
    if chars < PROBE_MIN_CHARS {
        return true;
    }
    let e = value.max(1.0) * PROBE_MIN_CHARS as f64;
    let first = window_tokens(units, masks, chars, &FIRST_WINDOWS, encoding);
    // The first windows are half the sample: scaled to the chunk, twice their tokens.
    let scaled_first = (2 * first * chars) as f64;
    if scaled_first <= PROBE_AGREE * e && PROBE_AGREE * scaled_first >= e {
        return false;
    }
    let later = window_tokens(units, masks, chars, &LATER_WINDOWS, encoding);
    let scaled = ((first + later) * chars) as f64;
    scaled > PROBE_RATIO * e || PROBE_RATIO * scaled < e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::count::count_tokens;
    use crate::tokens::features::word_masks;

    #[test]
    fn the_script_shortcuts_agree_with_the_ranges() {
        for c in 0..=0x10_FFFF {
            assert_eq!(script(c), script_of(c), "U+{c:04X}");
        }
    }

    #[test]
    fn ucs4_offsets_are_the_code_points() {
        let text = "aé東😀 \nβ".repeat(40);
        let units: Vec<u32> = text.chars().map(u32::from).collect();
        let targets = [0, 5, 17, units.len() - 1, units.len(), units.len() + 3];
        let mut offsets = [0; 6];
        unit_offsets::<u32>(&word_masks(&units), &targets, units.len(), &mut offsets);
        let len = units.len();
        assert_eq!(offsets, [0, 5, 17, len - 1, len, len]);
    }

    #[test]
    fn the_windows_are_the_code_points_they_name() {
        let text = "aé東😀 \nβ".repeat(40);
        let units: Vec<u32> = text.chars().map(u32::from).collect();
        let chars = units.len();
        let masks = word_masks(text.as_bytes());
        let targets: Vec<usize> = (0..=chars).step_by(7).collect();
        let mut offsets = vec![0; targets.len()];
        unit_offsets::<u8>(&masks, &targets, text.len(), &mut offsets);
        for (&t, &o) in targets.iter().zip(&offsets) {
            assert_eq!(text[..o].chars().count(), t);
        }
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let utf8 = probe_tokens(text.as_bytes(), &masks, chars, e);
            assert_eq!(utf8, probe_tokens(&units, &word_masks(&units), chars, e));
            let windows: usize = (0..PROBE_WINDOWS)
                .map(|k| {
                    let start = (2 * k + 1) * chars / 8 - 16;
                    let window: String = text.chars().skip(start).take(32).collect();
                    count_tokens(&window, e)
                })
                .sum();
            assert_eq!(utf8, windows);
        }
    }

    #[test]
    fn first_windows_reading_the_value_settle_the_chunk() {
        // Prose where the first and third windows fall, random Greek where the others do.
        let prose = "Memory layers let an agent keep goals, beliefs and reflections. ".repeat(4);
        let greek = "ψυρξθδ'ςμξαιχθζ'φπ'ιψνγζξκ'σψλκζρας ςωχςγ'δςχοτισφ πδβωπ'".repeat(4);
        let quarter = |s: &str| s.chars().take(256).collect::<String>();
        let text = [quarter(&prose), quarter(&greek)].concat().repeat(2);
        let chars = text.chars().count();
        let masks = word_masks(text.as_bytes());
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let first = window_tokens(text.as_bytes(), &masks, chars, &FIRST_WINDOWS, e);
            let all = probe_tokens(text.as_bytes(), &masks, chars, e);
            // A value the first windows read exactly, which all four read far above.
            let value = (2 * first * chars) as f64 / PROBE_MIN_CHARS as f64;
            assert!((all * chars) as f64 > PROBE_RATIO * value * PROBE_MIN_CHARS as f64);
            assert!(!sample_disagrees(text.as_bytes(), &masks, chars, value, e));
            // Where they read past PROBE_AGREE, all four windows decide.
            let low = value / 1.3;
            assert!(sample_disagrees(text.as_bytes(), &masks, chars, low, e));
        }
    }

    #[test]
    fn random_greek_words_read_denser_than_prose() {
        let greek = "ψυρξθδ'ςμξαιχθζ'φπ'ιψνγζξκ'σψλκζρας ςωχςγ'δςχοτισφ πδβωπ'".repeat(8);
        let prose = "Memory layers let an agent keep goals, beliefs and reflections between \
                     turns, and the context gate decides what fits. "
            .repeat(6);
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for (text, denser) in [(&greek, true), (&prose, false)] {
                let chars = text.chars().count();
                let masks = word_masks(text.as_bytes());
                let scaled =
                    probe_tokens(text.as_bytes(), &masks, chars, e) * chars / PROBE_MIN_CHARS;
                let exact = count_tokens(text, e);
                // The sample reads the chunk's density within a third either way.
                assert!(
                    scaled * 3 > exact * 2 && scaled * 3 < exact * 4,
                    "{e:?} {scaled} {exact}"
                );
                // A model value under half the exact count, or near it.
                let value = exact as f64 / if denser { 2.2 } else { 1.1 };
                assert_eq!(
                    sample_disagrees(text.as_bytes(), &masks, chars, value, e),
                    denser
                );
            }
        }
    }
}
