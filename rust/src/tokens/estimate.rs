//! The calibrated estimator: features x per-family coefficients.

use super::coefficients::{
    CL100K, CL100K_HANGUL_DOUBLE, CL100K_HANGUL_SINGLE, CL100K_HAN_DOUBLE, CL100K_HAN_SINGLE,
    CL100K_TWO_BYTE_SINGLE, FEATURE_COUNT, O200K, O200K_HANGUL_DOUBLE, O200K_HANGUL_SINGLE,
    O200K_HAN_DOUBLE, O200K_HAN_SINGLE, O200K_TWO_BYTE_SINGLE,
};
use super::count::count_units;
use super::features::{
    extract_any, extract_units_recording, Features, SingleTokenTables, Unit, WordMasks,
    PARALLEL_MIN_UNITS,
};
use super::kana::{kana_sample, KANA_CUT_SHARE};
use super::models::Encoding;
use super::probe::{
    sample_disagrees, sampled_script_changes, PROBE_FEW_PAIRS_CHARS, PROBE_HARD_SHARE,
    PROBE_KANA_SHARE, PROBE_MIN_CHARS, PROBE_SCRIPT_SHARE, PROBE_SHORT_TWO_BYTE_SHARE,
    PROBE_WHITESPACE_SHARE, PROBE_WORDS_SHARE, PROBE_WORDS_SHARE_TWO_BYTE, SCRIPT_CHANGES_MIN,
};
use super::words::{unknown_share, unknown_word_tokens, WORD_SAMPLE};
use std::sync::OnceLock;

static O200K_CATEGORIES: OnceLock<Box<[u8; 0x10000]>> = OnceLock::new();
static CL100K_CATEGORIES: OnceLock<Box<[u8; 0x10000]>> = OnceLock::new();

fn model(encoding: Encoding) -> (&'static [f64; FEATURE_COUNT], SingleTokenTables) {
    match encoding {
        Encoding::O200kBase => (
            &O200K,
            SingleTokenTables {
                han_single: &O200K_HAN_SINGLE,
                han_double: &O200K_HAN_DOUBLE,
                hangul_single: &O200K_HANGUL_SINGLE,
                hangul_double: &O200K_HANGUL_DOUBLE,
                two_byte_single: &O200K_TWO_BYTE_SINGLE,
                categories: &O200K_CATEGORIES,
            },
        ),
        Encoding::Cl100kBase => (
            &CL100K,
            SingleTokenTables {
                han_single: &CL100K_HAN_SINGLE,
                han_double: &CL100K_HAN_DOUBLE,
                hangul_single: &CL100K_HANGUL_SINGLE,
                hangul_double: &CL100K_HANGUL_DOUBLE,
                two_byte_single: &CL100K_TWO_BYTE_SINGLE,
                categories: &CL100K_CATEGORIES,
            },
        ),
    }
}

/// The feature vector the estimate is computed from (exposed for the reference tests).
pub fn features(text: &str, encoding: Encoding) -> Features {
    features_of_units(text.as_bytes(), encoding)
}

/// [`features`] of UTF-8 bytes or UCS-4 code points.
pub fn features_of_units<U: Unit + Sync>(units: &[U], encoding: Encoding) -> Features {
    extract_any(units, &model(encoding).1)
}

/// Estimated token count of `text` under `encoding`: 0 for "", at least 1 otherwise (no
/// non-empty text encodes to zero tokens). The text is judged in chunks of [`CHUNK_CHARS`]
/// code points: each chunk gets the rounded linear model's value, or its exact count where
/// the features cannot bound it (see [`model_is_unreliable`]), and the estimate is their sum.
pub fn estimate_tokens(text: &str, encoding: Encoding) -> usize {
    estimate_units(text.as_bytes(), encoding)
}

/// The code points of the chunks the estimate judges one by one. Judged whole, a text could
/// hide a part the model cannot bound behind enough ordinary text to keep every share under
/// its threshold; a chunk is small enough that the part dominates it, and large enough to
/// average the model's per-feature errors over.
pub const CHUNK_CHARS: usize = 1024;

/// [`estimate_tokens`] of UTF-8 bytes or UCS-4 code points (same result for the same text).
pub fn estimate_units<U: Unit + Sync>(units: &[U], encoding: Encoding) -> usize {
    if units.is_empty() {
        return 0;
    }
    let (coefficients, tables) = model(encoding);
    let chunk = |&(start, end, chars): &(usize, usize, usize)| -> f64 {
        let units = &units[start..end];
        let mut masks = Vec::with_capacity(units.len() / 64 + 1);
        let f = extract_units_recording(units, &tables, Some(&mut masks));
        let value: f64 = f
            .iter()
            .zip(coefficients.iter())
            .map(|(&x, &c)| x as f64 * c)
            .sum();
        if model_is_unreliable(&f, value, chars)
            || samples_distrust(units, &masks, &f, value, chars, encoding)
        {
            count_units(units, encoding) as f64
        } else {
            value
        }
    };
    let chunks = chunks(units);
    let values: Vec<f64> = if units.len() >= PARALLEL_MIN_UNITS && rayon::current_num_threads() > 1
    {
        use rayon::prelude::*;
        // Handed out by the sixteen: a task per chunk would cost about what it computes, and
        // larger groups can leave a thread idle at the end while the other finishes a group
        // whose chunks took the exact count or its samples.
        let groups: Vec<Vec<f64>> = chunks
            .par_chunks(16)
            .map(|group| group.iter().map(chunk).collect())
            .collect();
        groups.concat()
    } else {
        chunks.iter().map(chunk).collect()
    };
    // Added in order, whichever thread computed them, so the rounding is always the same.
    let total: f64 = values.iter().sum();
    // `as` saturates: a negative or NaN sum becomes 0 before the max.
    (total.round() as usize).max(1)
}

/// Whether samples of a chunk (`units`, its blocks' `masks`, `chars` code points) with
/// features `f` and model value `value` show the model cannot bound it: too many of its
/// sampled words are unknown, its kana look random or repeat one kana, or, where one of those
/// signs, random letters or mixed whitespace come near their threshold or the sampled
/// characters change script between letters, a sample of the chunk counted exactly holds many
/// more tokens than the value (see [`super::probe`]).
fn samples_distrust<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    f: &Features,
    value: f64,
    chars: usize,
    encoding: Encoding,
) -> bool {
    use super::features::slots::*;
    let e = value.max(1.0);
    let looked_up = may_hold_unknown_words(f, value, chars);
    let (words, all_words) = if looked_up {
        unknown_word_tokens(units, masks, chars, value, encoding, glued_words(f, value))
    } else {
        (0.0, 0.0)
    };
    if words > unknown_share(chars) * e {
        return true;
    }
    // The kana the sampled pairs cut stand for are at most all of them: under
    // PROBE_KANA_SHARE of the value, no kana check can pass.
    let kana_share = f[KANA] as f64 > PROBE_KANA_SHARE * e;
    let (kana_cuts, kana_repeat, kana_paired) = if kana_share {
        kana_sample(units, masks, chars, f[KANA], value, encoding)
    } else {
        (0.0, false, false)
    };
    if kana_cuts > KANA_CUT_SHARE || kana_repeat {
        return true;
    }
    let two_byte = f[OTHER_2BYTE] as f64;
    let hard = f[HARD_LETTERS] as f64;
    // Unknown words and random letters (each a sign of the other's kind of text) together.
    let in_doubt = all_words + hard > PROBE_WORDS_SHARE * e
        || (two_byte > e && all_words > PROBE_WORDS_SHARE_TWO_BYTE * e)
        // Every sampled word a token: words of 2-byte letters the vocabulary holds whole
        // ("привет" repeated) are one token each, where the model prices them by their letters.
        || (two_byte > e && looked_up && all_words == 0.0)
        || kana_cuts > PROBE_KANA_SHARE
        // Kana cut into pieces too short to pair, in a text too short for many samples.
        || (kana_share && !kana_paired && chars < PROBE_FEW_PAIRS_CHARS)
        || hard > PROBE_HARD_SHARE * e
        || f[MIXED_WHITESPACE] as f64 > PROBE_WHITESPACE_SHARE * e
        || (chars < PROBE_MIN_CHARS && two_byte > PROBE_SHORT_TWO_BYTE_SHARE * e)
        || (non_ascii_chars(f) as f64 > PROBE_SCRIPT_SHARE * e
            && sampled_script_changes(units, masks, chars) >= SCRIPT_CHANGES_MIN);
    in_doubt && sample_disagrees(units, masks, chars, value, encoding)
}

/// The characters past ASCII of a chunk with features `f`.
fn non_ascii_chars(f: &Features) -> u64 {
    use super::features::slots::*;
    f[HAN_SINGLE..=OTHER_2BYTE].iter().sum::<u64>()
        + f[OTHER_3BYTE]
        + f[FOUR_BYTE]
        + f[HAN_DOUBLE]
        + f[HANGUL_DOUBLE]
}

/// Whether a chunk of `chars` code points with features `f` and model value `value` has its
/// words looked up: where they could take more than [`unknown_share`] of the value, or, next
/// to 2-byte characters that carry more than the whole value, more than
/// [`PROBE_WORDS_SHARE_TWO_BYTE`] of it. Every word it looks at follows a space, a tab, a line
/// break, punctuation or the chunk's start, so it starts a letter segment, a run of 2-byte
/// characters or a run of ideographs and kana (and holds kana); where even all of them
/// sampled and unknown could not pass that share, the lookups are skipped (most CJK text,
/// digits, punctuation), and the words put the chunk in no doubt either.
fn may_hold_unknown_words(f: &Features, value: f64, chars: usize) -> bool {
    use super::features::slots::*;
    let e = value.max(1.0);
    let words = f[SEG_LEN_1..=SEG_LEN_12P].iter().sum::<u64>()
        + f[OTHER_2BYTE_RUNS]
        + f[KANA].min(f[HAN_KANA_RUNS]);
    // At most ceil(words / WORD_SAMPLE) are sampled, each taking 4 half tokens or its letters
    // with diacritics (2-byte characters), which is at most both.
    let sampled = words.div_ceil(WORD_SAMPLE as u64);
    let half_tokens = 4 * sampled + f[OTHER_2BYTE];
    let share = if f[OTHER_2BYTE] as f64 > e {
        PROBE_WORDS_SHARE_TWO_BYTE
    } else {
        unknown_share(chars)
    };
    (WORD_SAMPLE as u64 * half_tokens) as f64 / 2.0 > share * e
}

/// Words glued to punctuation are looked up too where single punctuation glued to an ASCII
/// letter is more than this share of a chunk's value: letters glued by punctuation are at
/// 0.45 or more of it, the test corpus's code and JSON at most 0.37 (see [`glued_words`]).
pub const GLUED_PUNCT_SHARE: f64 = 0.4;

/// ... or where 2-byte characters (Latin with diacritics, Greek, Cyrillic...) are more than
/// this share of it.
pub const GLUED_TWO_BYTE_SHARE: f64 = 0.25;

/// Whether the word lookups of a chunk with features `f` and model value `value` take words
/// glued to ASCII punctuation too: random letters glued by punctuation have the features of
/// words and punctuation, but where they carry a share of the value, so do single punctuation
/// marks before an ASCII letter, or 2-byte characters. Elsewhere (most code, JSON and English
/// prose) the lookups are skipped: code glues many known words to punctuation, and each
/// lookup costs time.
fn glued_words(f: &Features, value: f64) -> bool {
    use super::features::slots::*;
    let e = value.max(1.0);
    f[PUNCT_GLUED] as f64 > GLUED_PUNCT_SHARE * e
        || f[OTHER_2BYTE] as f64 > GLUED_TWO_BYTE_SHARE * e
}

/// `(start, end, code points)` of the chunks of `units`: [`CHUNK_CHARS`] code points each,
/// the last one joining the one before it when it holds fewer than half as many.
fn chunks<U: Unit>(units: &[U]) -> Vec<(usize, usize, usize)> {
    // (unit index, code points before it) of every cut, the text's end included.
    let mut cuts = vec![(0usize, 0usize)];
    if size_of::<U>() == 1 {
        // UTF-8: every byte but the continuation bytes starts a code point. Whole blocks are
        // counted at once; only a block holding the next cut is walked byte by byte.
        let is_lead = |u: &U| u.value() & 0xC0 != 0x80;
        let (mut chars, mut next, mut i) = (0, CHUNK_CHARS, 0);
        while i < units.len() {
            let end = (i + 64).min(units.len());
            let leads = units[i..end].iter().filter(|u| is_lead(u)).count();
            if chars + leads <= next {
                chars += leads;
            } else {
                for (j, unit) in units.iter().enumerate().take(end).skip(i) {
                    if is_lead(unit) {
                        if chars == next {
                            cuts.push((j, chars));
                            next += CHUNK_CHARS;
                        }
                        chars += 1;
                    }
                }
            }
            i = end;
        }
        cuts.push((units.len(), chars));
    } else {
        cuts.extend(
            (CHUNK_CHARS..units.len())
                .step_by(CHUNK_CHARS)
                .map(|i| (i, i)),
        );
        cuts.push((units.len(), units.len()));
    }
    let last = cuts.len() - 1;
    if last >= 2 && cuts[last].1 - cuts[last - 1].1 < CHUNK_CHARS / 2 {
        cuts.remove(last - 1);
    }
    cuts.windows(2)
        .map(|w| (w[0].0, w[1].0, w[1].1 - w[0].1))
        .collect()
}

/// Texts shorter than this are counted exactly: a few words are too few for the model to
/// average over (a line of pronounceable nonsense words is twice the tokens of a line of
/// English), and through the Python API a call of the exact counter on 120 code points of the
/// test corpus costs about twice the estimate's (7.7 against 3.6 µs).
pub const SHORT_EXACT_CHARS: usize = 128;

/// Whether the linear model cannot be trusted on a chunk of `chars` code points with
/// features `f` and model value `value`: the chunk is made of pieces whose token count the
/// features do not bound (long runs of one character, whitespace, punctuation, fragments such
/// as base64 and hex, random letters, mixed whitespace or punctuation, control characters,
/// scripts and symbols the calibration corpus barely holds), or its density of tokens per
/// character lies outside what any calibrated text shows, or it is shorter than
/// [`SHORT_EXACT_CHARS`]. Such chunks are counted exactly; ordinary prose, code, JSON and CJK text
/// almost never meet these conditions (the tests and `tools/calibrate_tokens.py evaluate`
/// report how often they do). The signs of an unbounded part are compared with the value
/// `e` rather than with the length: a part that makes up a small share of the tokens can only
/// move the estimate by a small share.
pub fn model_is_unreliable(f: &Features, value: f64, chars: usize) -> bool {
    use super::features::slots::*;
    let n = chars as f64;
    let e = value.max(1.0);
    let at = |k: usize| f[k] as f64;
    let segments: f64 = (SEG_LEN_1..=SEG_LEN_12P).map(at).sum();
    let pieces = segments + at(DIGIT_GROUPS);
    let fragments = at(SEG_LEN_1) + at(SEG_LEN_1 + 1) + at(DIGIT_GROUPS);
    let han_kana = at(HAN_SINGLE) + at(HAN_DOUBLE) + at(HAN_OTHER) + at(KANA);
    let hangul = at(HANGUL_SINGLE) + at(HANGUL_DOUBLE) + at(HANGUL_OTHER);
    // Characters each vocabulary spells in a varying number of tokens.
    let unusual = 0.5 * at(HAN_OTHER) + at(HANGUL_OTHER) + at(OTHER_3BYTE) + at(FOUR_BYTE);
    // A short text: the model has too little to average over (ten letters may be one word or
    // ten tokens), and counting it costs about what estimating it does.
    n < SHORT_EXACT_CHARS as f64
        || n > 8.0 * e
        || n < 0.6 * e
        || at(SPACE_RUN_CHARS) + at(NEWLINE_CHARS) > 0.6 * n
        || at(NEWLINE_CHARS) - at(NEWLINE_RUNS) > 0.1 * n
        || at(NEWLINE_RUNS) > 0.15 * n
        || at(SEG_LONG_EXTRA) > 0.1 * n
        || at(PUNCT_EXTRA) > 0.25 * n
        || unusual > 0.15 * e
        || (fragments > 0.6 * pieces && pieces > 0.25 * e)
        || at(OTHER_2BYTE) > 12.0 * at(OTHER_2BYTE_RUNS)
        // CJK words cut short by spaces or punctuation, where they carry a share of the value.
        || (han_kana > 0.1 * e && at(HAN_KANA_RUNS) > 0.35 * han_kana)
        // Each letter segment, digit group and newline run is a piece of its own of at least
        // one token: an estimate well under their number is surely too low.
        || 0.8 * (pieces + at(NEWLINE_RUNS)) > e
        // Random strings: a word's letters mostly alternate between consonants and vowels. A
        // text of a few words has too few letters to tell by a share, and costs little to count.
        || at(HARD_LETTERS) > e * if n < 128.0 { 0.2 } else { 0.4 }
        || at(MIXED_WHITESPACE) > 0.25 * e
        || at(PUNCT_EXTRA) > 2.0 * e
        || at(CONTROL_CHARS) > 0.2 * e
        // Combining marks, rare letters, random code points: the vocabulary spells each in
        // one to two tokens, the model in a fraction of one.
        || at(RARE_TWO_BYTE) > 0.25 * e
        // Hangul words are a few syllables long; the vocabularies hold no long runs of them.
        || hangul > 8.0 * at(HANGUL_RUNS)
        // Ideographic spaces and fullwidth forms without CJK text around them.
        || at(CJK_PUNCT) - han_kana - hangul > 0.25 * e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::count::count_tokens;

    #[test]
    fn empty_is_zero_and_text_is_positive() {
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            assert_eq!(estimate_tokens("", e), 0);
            assert!(estimate_tokens(" ", e) >= 1);
            assert!(estimate_tokens("\n", e) >= 1);
        }
    }

    #[test]
    fn utf8_and_ucs4_agree() {
        let text = "naïve 東京 ソウル 서울 🚀 camelCase {\"k\": [1, 2]}\n\tend";
        let units: Vec<u32> = text.chars().map(u32::from).collect();
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            assert_eq!(features(text, e), features_of_units(&units, e));
            assert_eq!(estimate_tokens(text, e), estimate_units(&units, e));
        }
    }

    #[test]
    fn runs_the_model_cannot_bound_are_counted_exactly() {
        let texts = [
            " ".repeat(40_000),
            "\n".repeat(10_000),
            format!("note{}", "\n".repeat(100_000)),
            "a".repeat(20_000),
            "\u{1F600}".repeat(5_000),
            "-".repeat(10_000),
            "  \n".repeat(5_000),
            "\u{30fc}".repeat(3_000),
            "\u{30fb}".repeat(3_000),
        ];
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in &texts {
                // Every chunk is counted exactly: the estimate is the sum of their counts, a
                // token or two per cut away from the count of the whole.
                let bytes = text.as_bytes();
                let chunked: usize = chunks(bytes)
                    .iter()
                    .map(|&(start, end, _)| count_tokens(&text[start..end], e))
                    .sum();
                assert_eq!(estimate_tokens(text, e), chunked, "{e:?} {:?}", &text[..8]);
                let exact = count_tokens(text, e);
                assert!(
                    chunked.abs_diff(exact) <= 2 * chunks(bytes).len(),
                    "{chunked} {exact}"
                );
                let units: Vec<u32> = text.chars().map(u32::from).collect();
                assert_eq!(estimate_units(&units, e), chunked);
            }
        }
    }

    #[test]
    fn chunks_hold_whole_code_points_and_agree_between_utf8_and_ucs4() {
        let piece = "aé東😀 \n";
        for repeats in [0, 1, 170, 171, 255, 256, 300, 1000] {
            let text = piece.repeat(repeats);
            let units: Vec<u32> = text.chars().map(u32::from).collect();
            let utf8 = chunks(text.as_bytes());
            let ucs4 = chunks(&units);
            assert_eq!(utf8.len(), ucs4.len());
            for (&(start, end, chars), &(from, to, count)) in utf8.iter().zip(&ucs4) {
                assert_eq!(text[start..end].chars().count(), chars);
                assert_eq!((chars, from + chars), (count, to));
                // The last chunk joins the one before it when it is short.
                assert!(chars >= CHUNK_CHARS / 2 || utf8.len() == 1);
                assert!(chars < CHUNK_CHARS * 3 / 2);
            }
            assert_eq!(utf8.last().map_or(0, |c| c.1), text.len());
        }
    }

    #[test]
    fn words_the_model_cannot_bound_are_counted_exactly() {
        // Both were estimated at under half their exact count: random consonant strings look
        // like words to the model, and a tab, unlike a space, is not part of the next word's
        // token.
        let prose = "Memory layers let an agent keep goals, beliefs and reflections between \
                     turns, and the context gate decides what fits into the next prompt. ";
        let parts = [
            "gqcd fpxcvj dr dkdwr xf xcx qckcwg rgwf mwhfxx jpfwdxc jtwrns spmkhk xm tnsmzd vr \
             ngt cdwxn pztx ddltd mx smqpbsp zft jm kqq dhsqw grwl rpqkgdh kkb xhlmb rwp xngvzc \
             wqqqq tq jd shf zcfb gwfpzb jz glpz "
                .repeat(15),
            "und\t".repeat(1_500),
        ];
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for part in &parts {
                let text = format!("{prose}{part}{prose}");
                let exact = count_tokens(&text, e);
                let estimate = estimate_tokens(&text, e);
                assert!(
                    2 * estimate >= exact && estimate <= 2 * exact,
                    "{estimate} {exact}"
                );
            }
        }
    }

    #[test]
    fn close_to_exact_on_plain_prose() {
        let text = "Memory layers let an agent keep goals, beliefs and reflections between \
                    turns, and the context gate decides what fits into the next prompt. "
            .repeat(10);
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let exact = count_tokens(&text, e) as f64;
            let estimate = estimate_tokens(&text, e) as f64;
            assert!(
                (estimate - exact).abs() / exact < 0.15,
                "{e:?}: {estimate} vs {exact}"
            );
        }
    }
}
