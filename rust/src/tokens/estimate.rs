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
use super::kana::{kana_sample, KanaSample, KANA_CUT_SHARE};
use super::models::Encoding;
use super::probe::{
    sample_disagrees, sampled_script_changes, PROBE_FEW_PAIRS_CHARS, PROBE_HARD_SHARE,
    PROBE_KANA_SHARE, PROBE_SCRIPT_SHARE, PROBE_WHITESPACE_SHARE, PROBE_WORDS_SHARE,
    PROBE_WORDS_SHARE_TWO_BYTE, SCRIPT_CHANGES_MIN,
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

/// Room for the word masks of a chunk of UCS-4 units (one per 64 units) without growing: a
/// chunk holds fewer than 1.5 times [`CHUNK_CHARS`] code points.
const MASKS_CAPACITY: usize = CHUNK_CHARS * 3 / 2 / 64 + 1;

/// [`estimate_tokens`] of UTF-8 bytes or UCS-4 code points (same result for the same text).
pub fn estimate_units<U: Unit + Sync>(units: &[U], encoding: Encoding) -> usize {
    if units.is_empty() {
        return 0;
    }
    let chunks = chunks(units);
    // `masks` is the buffer of the blocks' word masks, reused from chunk to chunk.
    let chunk = |&(start, end, chars): &(usize, usize, usize), masks: &mut Vec<WordMasks>| {
        chunk_value(&units[start..end], chars, encoding, masks)
    };
    let values: Vec<f64> = if units.len() >= PARALLEL_MIN_UNITS && rayon::current_num_threads() > 1
    {
        use rayon::prelude::*;
        // Handed out by the sixteen: a task per chunk would cost about what it computes, and
        // larger groups can leave a thread idle at the end while the other finishes a group
        // whose chunks took the exact count or its samples.
        let groups: Vec<Vec<f64>> = chunks
            .par_chunks(16)
            .map(|group| {
                let mut masks = Vec::with_capacity(MASKS_CAPACITY);
                group.iter().map(|c| chunk(c, &mut masks)).collect()
            })
            .collect();
        groups.concat()
    } else {
        let mut masks = Vec::with_capacity(MASKS_CAPACITY);
        chunks.iter().map(|c| chunk(c, &mut masks)).collect()
    };
    rounded(&values)
}

/// The estimate of a text from the values of its chunks, in order: added in that order,
/// whichever thread computed them, so the rounding is always the same.
fn rounded<'a>(values: impl IntoIterator<Item = &'a f64>) -> usize {
    let total: f64 = values.into_iter().sum();
    // `as` saturates: a negative or NaN sum becomes 0 before the max.
    (total.round() as usize).max(1)
}

/// The value the estimate gives one chunk (`units`, `chars` code points): the linear model's,
/// or the chunk's exact count where the model cannot bound it. Never negative: the model's
/// value is taken only where it is at least an eighth of the code points (see
/// [`model_is_unreliable`]), which [`estimate_prefix_units`] relies on. `masks` is a buffer for
/// the blocks' word masks, cleared here.
fn chunk_value<U: Unit>(
    units: &[U],
    chars: usize,
    encoding: Encoding,
    masks: &mut Vec<WordMasks>,
) -> f64 {
    let (coefficients, tables) = model(encoding);
    masks.clear();
    let f = extract_units_recording(units, &tables, Some(&mut *masks));
    let masks = &masks[..];
    let value: f64 = f
        .iter()
        .zip(coefficients.iter())
        .map(|(&x, &c)| x as f64 * c)
        .sum();
    if model_is_unreliable(&f, value, chars)
        || samples_distrust(units, masks, &f, value, chars, encoding)
    {
        count_units(units, encoding) as f64
    } else {
        value
    }
}

/// The length in bytes of a prefix of `text` whose [`estimate_tokens`] is at most
/// `max_tokens` (see [`estimate_prefix_units`]).
pub fn estimate_prefix(text: &str, max_tokens: usize, encoding: Encoding) -> usize {
    estimate_prefix_units(text.as_bytes(), max_tokens, encoding)
}

/// The length in units (a code point boundary) of the prefix of `units` that bisecting the
/// [`estimate_units`] of its prefixes by code points finds for `max_tokens`: the longest one
/// whose estimate is at most `max_tokens` where the estimates grow with the prefix; where they
/// wobble (a word growing by a letter can be estimated a token lower), one whose estimate is at
/// most `max_tokens` and whose next code point's is over it.
///
/// One pass: a prefix's estimate is the values of its whole chunks and of the chunk it ends
/// with (see [`chunks`]), so each whole chunk is valued once, in order, and each probe values
/// only its last chunk. Every probe is answered with the estimate [`estimate_units`] gives that
/// prefix, added in the same order, or, once the whole chunks before its last one add up to
/// more than `max_tokens`, without valuing more: no chunk's value is negative (see
/// [`chunk_value`]), so the prefix's estimate is over it too.
pub fn estimate_prefix_units<U: Unit>(units: &[U], max_tokens: usize, encoding: Encoding) -> usize {
    let mut masks = Vec::with_capacity(MASKS_CAPACITY);
    prefix_within(units, max_tokens, |part, chars| {
        chunk_value(part, chars, encoding, &mut masks)
    })
}

/// [`estimate_prefix_units`] with `value` giving the value of a chunk (its units, its code
/// points): the tests count the work through it.
fn prefix_within<U: Unit>(
    units: &[U],
    max_tokens: usize,
    mut value: impl FnMut(&[U], usize) -> f64,
) -> usize {
    let cuts = cuts(units);
    let n = cuts[cuts.len() - 1].1;
    // The unit a code point starts at (the end for `n`), walked from the cut before it.
    let unit_at = |c: usize| {
        if size_of::<U>() != 1 || c == n {
            return if c == n { units.len() } else { c };
        }
        let (mut i, mut chars) = cuts[c / CHUNK_CHARS];
        while chars < c {
            i += 1;
            if units[i].value() & 0xC0 != 0x80 {
                chars += 1;
            }
        }
        i
    };
    // The whole chunks valued so far, in order, and how many of them first added up to more
    // than `max_tokens`, when they did.
    let mut values: Vec<f64> = Vec::new();
    let mut over_after: Option<usize> = None;
    // Whether the prefix of `c` code points is estimated at most `max_tokens`.
    let mut fits = |c: usize| {
        if c == 0 {
            return true;
        }
        // The chunks `estimate_units` cuts the prefix into: `last` whole ones, then the rest.
        let whole = (c - 1) / CHUNK_CHARS;
        let last = if whole >= 1 && c - whole * CHUNK_CHARS < CHUNK_CHARS / 2 {
            whole - 1
        } else {
            whole
        };
        while values.len() < last && over_after.is_none() {
            let m = values.len();
            let chunk = value(&units[cuts[m].0..cuts[m + 1].0], CHUNK_CHARS);
            debug_assert!(chunk >= 0.0, "a chunk valued {chunk}");
            values.push(chunk);
            if rounded(&values) > max_tokens {
                over_after = Some(values.len());
            }
        }
        if over_after.is_some_and(|m| m <= last) {
            return false;
        }
        let rest = value(&units[cuts[last].0..unit_at(c)], c - last * CHUNK_CHARS);
        rounded(values[..last].iter().chain([&rest])) <= max_tokens
    };
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    unit_at(lo)
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
    // The kana the sampled pairs cut or repeat stand for are at most all of them: under
    // DILUTED_KANA_SHARE of the value, neither they nor their part of the diluted signs can
    // pass a threshold. Runs of one kana count the chunk exactly from that share: no Japanese
    // text repeats most of its sampled pairs (of the test corpus's chunks with kana over it,
    // none repeats a quarter), and beside other overpriced characters a run of `・` under half
    // the value took the estimate past twice the count.
    let kana_share = f[KANA] as f64 > PROBE_KANA_SHARE * e;
    let kana = if f[KANA] as f64 > DILUTED_KANA_SHARE * e {
        kana_sample(units, masks, chars, f[KANA], value, encoding)
    } else {
        KanaSample::default()
    };
    let kana_cuts = if kana_share { kana.judged_cuts() } else { 0.0 };
    if kana_cuts > KANA_CUT_SHARE
        || kana.repeated()
        || diluted_exact_signs(f, value, chars, words, kana_cuts) > DILUTED_EXACT
    {
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
        || (kana_share && !kana.paired() && chars < PROBE_FEW_PAIRS_CHARS)
        || hard > PROBE_HARD_SHARE * e
        || f[MIXED_WHITESPACE] as f64 > PROBE_WHITESPACE_SHARE * e
        || (non_ascii_chars(f) as f64 > PROBE_SCRIPT_SHARE * e
            && sampled_script_changes(units, masks, chars) >= SCRIPT_CHANGES_MIN)
        || diluted_signs(f, value, chars, all_words, &kana) > 1.0;
    in_doubt && sample_disagrees(units, masks, chars, value, encoding)
}

/// The runs of 2-byte characters of a chunk with features `f` where they stand alone: most
/// of their runs one character long, and more of them than ASCII letter segments (no-break
/// spaces before spaces, which the model prices as letters with diacritics, where a
/// vocabulary spells several with their spaces in one token); 0 elsewhere. In words (Latin
/// with diacritics, Greek, Cyrillic) they are fewer than the segments or in longer runs: of
/// the test corpus's chunks, none has them.
fn lone_two_byte(f: &Features) -> f64 {
    use super::features::slots::*;
    let runs = f[OTHER_2BYTE_RUNS];
    let segments: u64 = f[SEG_LEN_1..=SEG_LEN_12P].iter().sum();
    if 4 * f[OTHER_2BYTE] <= 5 * runs && runs > segments {
        runs as f64
    } else {
        0.0
    }
}

/// The sign of the check of pieces in [`model_is_unreliable`] (letter segments, digit groups
/// and line-break runs, each at least a token), as the share of its threshold.
fn pieces_sign(f: &Features, value: f64) -> f64 {
    use super::features::slots::*;
    let pieces = f[SEG_LEN_1..=SEG_LEN_12P].iter().sum::<u64>() + f[DIGIT_GROUPS];
    0.8 * (pieces + f[NEWLINE_RUNS]) as f64 / value.max(1.0)
}

/// A part of a chunk whose sign weighs at least this share of its threshold counts towards
/// [`diluted_signs`]. Ordinary chunks show many signs at a small share (Japanese text cuts a
/// third of its kana pairs, CJK text beside Latin words has short runs); counted whole, they
/// would put a sixth of the Japanese and CJK chunks in doubt, where at 0.4 of their
/// thresholds about one in 150 of the benchmark's chunks is.
pub const DILUTED_SIGN_MIN: f64 = 0.4;

/// Kana are sampled for [`diluted_signs`] from this share of the value: below it, the kana
/// they stand for weigh under [`DILUTED_SIGN_MIN`] of [`PROBE_KANA_SHARE`].
pub const DILUTED_KANA_SHARE: f64 = DILUTED_SIGN_MIN * PROBE_KANA_SHARE;

/// The signs of parts of a chunk (features `f`, model value `value`) the model misjudges,
/// each as the share it weighs of its own threshold, added up where each is at least
/// [`DILUTED_SIGN_MIN`]: over 1, the chunk is in doubt. Parts of different kinds dilute each
/// other: random kana among CJK punctuation and random Greek words keep the kana pairs, the
/// unknown words and the random letters each under its threshold, though together they take
/// twice the model's value; a run of `・` after a CJK word repeated lengthens the CJK runs
/// the check of short runs divides by, though both parts take half the model's value;
/// pronounceable nonsense between runs of random punctuation keeps both under their
/// thresholds; a word and a comma repeated before a run of CRLF line breaks keep the checks
/// of pieces and of line breaks each under theirs, though the chunk holds twice the value.
/// The signs: unknown words and random letters (`all_words` sampled unknown word tokens),
/// kana cut or repeated in `kana`'s pairs (weighed by how far its pairs go towards enough),
/// mixed whitespace, CJK runs cut short, and of the checks that count a chunk of
/// `chars` code points exactly, long runs of punctuation, control characters, rare 2-byte
/// characters, CJK punctuation without CJK text, line breaks beyond the first of a run, and
/// with these the check of pieces. That one joins only where the line breaks weigh: ordinary
/// prose reads 0.4 to 0.95 of its threshold, and counted with the others it would put about
/// a quarter of the test corpus's chunks in doubt.
fn diluted_signs(f: &Features, value: f64, chars: usize, all_words: f64, kana: &KanaSample) -> f64 {
    use super::features::slots::*;
    let e = value.max(1.0);
    let at = |k: usize| f[k] as f64;
    let [short_runs, punct, control, rare, lone, line_breaks] = exact_count_signs(f, value, chars);
    let pieces = if line_breaks >= DILUTED_SIGN_MIN {
        pieces_sign(f, value)
    } else {
        0.0
    };
    let signs = [
        (all_words + at(HARD_LETTERS)) / (PROBE_WORDS_SHARE * e),
        kana.confidence() * kana.cut_share() / PROBE_KANA_SHARE,
        kana.confidence() * kana.repeat_share() / PROBE_KANA_SHARE,
        at(MIXED_WHITESPACE) / (PROBE_WHITESPACE_SHARE * e),
        short_runs,
        punct,
        control,
        rare,
        lone,
        line_breaks,
        pieces,
    ];
    signs.iter().filter(|&&s| s >= DILUTED_SIGN_MIN).sum()
}

/// Where the signs of a chunk (features `f`, model value `value`, `chars` code points), each
/// as the share it weighs of the threshold that counts the chunk exactly, add up to more than
/// this from [`DILUTED_SIGN_MIN`] (see [`diluted_exact_signs`]), the chunk is counted exactly
/// without a sample: the sample's windows can fall beside a part it holds (random words
/// before a run of tabs and random 4-byte characters read about the model's value). Of the
/// benchmark's and the evaluation corpus's chunks, none adds up to 1.6.
pub const DILUTED_EXACT: f64 = 1.75;

/// The signs of [`diluted_signs`] against the thresholds that count a chunk exactly, added
/// up from [`DILUTED_SIGN_MIN`]: `words` (the sampled unknown word tokens judged), the kana
/// cut as random kana are (`kana_cuts`, as a share of the value), random letters, mixed
/// whitespace, characters each vocabulary spells in a varying number of tokens, and the
/// signs both levels share.
fn diluted_exact_signs(f: &Features, value: f64, chars: usize, words: f64, kana_cuts: f64) -> f64 {
    use super::features::slots::*;
    let e = value.max(1.0);
    let at = |k: usize| f[k] as f64;
    let [short_runs, punct, control, rare, lone, line_breaks] = exact_count_signs(f, value, chars);
    let signs = [
        words / (unknown_share(chars) * e),
        kana_cuts / KANA_CUT_SHARE,
        at(HARD_LETTERS) / (HARD_SHARE * e),
        at(MIXED_WHITESPACE) / (MIXED_WHITESPACE_SHARE * e),
        unusual(f) / (UNUSUAL_SHARE * e),
        short_runs,
        punct,
        control,
        rare,
        lone,
        line_breaks,
    ];
    signs.iter().filter(|&&s| s >= DILUTED_SIGN_MIN).sum()
}

/// Signs [`model_is_unreliable`] counts a chunk exactly for, as the share each weighs of its
/// threshold: CJK runs cut short, punctuation beyond the second in a run, control
/// characters, rare 2-byte characters, CJK punctuation without CJK text, line breaks beyond
/// the first of a run.
fn exact_count_signs(f: &Features, value: f64, chars: usize) -> [f64; 6] {
    use super::features::slots::*;
    let e = value.max(1.0);
    let at = |k: usize| f[k] as f64;
    let han_kana = at(HAN_SINGLE) + at(HAN_DOUBLE) + at(HAN_OTHER) + at(KANA);
    let hangul = at(HANGUL_SINGLE) + at(HANGUL_DOUBLE) + at(HANGUL_OTHER);
    let short_runs = if han_kana > CJK_MIN_SHARE * e {
        at(HAN_KANA_RUNS) / (CJK_SHORT_RUNS * han_kana)
    } else {
        0.0
    };
    [
        short_runs,
        at(PUNCT_EXTRA) / (PUNCT_EXTRA_SHARE * chars as f64),
        at(CONTROL_CHARS) / (CONTROL_SHARE * e),
        at(RARE_TWO_BYTE) / (RARE_TWO_BYTE_SHARE * e),
        (at(CJK_PUNCT) - han_kana - hangul) / (LONE_CJK_PUNCT_SHARE * e),
        (at(NEWLINE_CHARS) - at(NEWLINE_RUNS)) / (NEWLINE_EXTRA_SHARE * chars as f64),
    ]
}

/// Characters each vocabulary spells in a varying number of tokens (half the ideographs
/// neither one nor two tokens alone, hangul neither, other 3-byte and 4-byte characters), of
/// a chunk with features `f`.
fn unusual(f: &Features) -> f64 {
    use super::features::slots::*;
    let at = |k: usize| f[k] as f64;
    0.5 * at(HAN_OTHER) + at(HANGUL_OTHER) + at(OTHER_3BYTE) + at(FOUR_BYTE)
}

/// A chunk is counted exactly where punctuation beyond the second in a run is more than this
/// share of its code points ...
pub const PUNCT_EXTRA_SHARE: f64 = 0.25;

/// ... or characters each vocabulary spells in a varying number of tokens more than this
/// share of its value ...
pub const UNUSUAL_SHARE: f64 = 0.15;

/// ... or random letters (third in a row of consonants or of vowels) more than this share ...
pub const HARD_SHARE: f64 = 0.4;

/// ... or mixed whitespace (a tab after neither a tab nor a line break, a space after a tab)
/// more than this share ...
pub const MIXED_WHITESPACE_SHARE: f64 = 0.25;

/// ... or control characters (but tabs and line breaks) more than this share of its value ...
pub const CONTROL_SHARE: f64 = 0.2;

/// ... or 2-byte characters that are not one token alone more than this share ...
pub const RARE_TWO_BYTE_SHARE: f64 = 0.25;

/// ... or CJK and fullwidth punctuation beyond the CJK characters more than this share ...
pub const LONE_CJK_PUNCT_SHARE: f64 = 0.25;

/// ... or line breaks beyond the first of a run more than this share of its code points ...
pub const NEWLINE_EXTRA_SHARE: f64 = 0.1;

/// ... or 2-byte characters standing alone (see [`lone_two_byte`]) more than this share of
/// its value: the sample cannot judge them, its windows falling as often beside them as on
/// them (on the words around them, they read about the value).
pub const LONE_TWO_BYTE_SHARE: f64 = 0.25;

/// CJK ideographs and kana are judged by their runs where they are more than this share of
/// a chunk's value ...
pub const CJK_MIN_SHARE: f64 = 0.1;

/// ... and the chunk is counted exactly where it has more runs than this share of them: CJK
/// words cut short by spaces or punctuation.
pub const CJK_SHORT_RUNS: f64 = 0.35;

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
    let mut cuts = cuts(units);
    let last = cuts.len() - 1;
    if last >= 2 && cuts[last].1 - cuts[last - 1].1 < CHUNK_CHARS / 2 {
        cuts.remove(last - 1);
    }
    cuts.windows(2)
        .map(|w| (w[0].0, w[1].0, w[1].1 - w[0].1))
        .collect()
}

/// `(unit index, code points before it)` of the start of `units`, of every [`CHUNK_CHARS`]th
/// code point after it, and of the end.
fn cuts<U: Unit>(units: &[U]) -> Vec<(usize, usize)> {
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
    cuts
}

/// Texts shorter than this are counted exactly: a few words are too few for the model to
/// average over (a line of pronounceable nonsense words is twice the tokens of a line of
/// English), and through the Python API a call of the exact counter on 250 code points of
/// English costs about twice the estimate's (4.8 against 2.1 µs).
pub const SHORT_EXACT_CHARS: usize = 256;

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
    // A short text: the model has too little to average over (ten letters may be one word or
    // ten tokens), and counting it costs about what estimating it does.
    n < SHORT_EXACT_CHARS as f64
        || n > 8.0 * e
        || n < 0.6 * e
        || at(SPACE_RUN_CHARS) + at(NEWLINE_CHARS) > 0.6 * n
        || at(NEWLINE_CHARS) - at(NEWLINE_RUNS) > NEWLINE_EXTRA_SHARE * n
        || at(NEWLINE_RUNS) > 0.15 * n
        || at(SEG_LONG_EXTRA) > 0.1 * n
        || at(PUNCT_EXTRA) > PUNCT_EXTRA_SHARE * n
        || unusual(f) > UNUSUAL_SHARE * e
        || (fragments > 0.6 * pieces && pieces > 0.25 * e)
        || at(OTHER_2BYTE) > 12.0 * at(OTHER_2BYTE_RUNS)
        || lone_two_byte(f) > LONE_TWO_BYTE_SHARE * e
        // CJK words cut short by spaces or punctuation, where they carry a share of the value.
        || (han_kana > CJK_MIN_SHARE * e && at(HAN_KANA_RUNS) > CJK_SHORT_RUNS * han_kana)
        // Each letter segment, digit group and newline run is a piece of its own of at least
        // one token: an estimate well under their number is surely too low.
        || 0.8 * (pieces + at(NEWLINE_RUNS)) > e
        // Random strings: a word's letters mostly alternate between consonants and vowels.
        || at(HARD_LETTERS) > HARD_SHARE * e
        || at(MIXED_WHITESPACE) > MIXED_WHITESPACE_SHARE * e
        || at(PUNCT_EXTRA) > 2.0 * e
        || at(CONTROL_CHARS) > CONTROL_SHARE * e
        // Combining marks, rare letters, random code points: the vocabulary spells each in
        // one to two tokens, the model in a fraction of one.
        || at(RARE_TWO_BYTE) > RARE_TWO_BYTE_SHARE * e
        // Hangul words are a few syllables long; the vocabularies hold no long runs of them.
        || hangul > 8.0 * at(HANGUL_RUNS)
        // Ideographic spaces and fullwidth forms without CJK text around them.
        || at(CJK_PUNCT) - han_kana - hangul > LONE_CJK_PUNCT_SHARE * e
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
    fn parts_that_dilute_each_others_signs_are_counted_exactly() {
        // A CJK word repeated is counted exactly for its short runs, a run of `・` for its
        // repeated kana; together, the run lengthens the runs and is under the share of kana
        // sampled, and the estimate was over twice the count.
        let word_then_dots = format!("{}{}", "数据 ".repeat(100), "・".repeat(100));
        // Random kana among CJK punctuation, then random Greek words (found by
        // tools/explore_tokens.py): too few kana pairs to judge, unknown words under their
        // share, and the o200k estimate under half the count.
        let kana_among_punctuation = concat!(
            "ト》《わは〓だよ〧ヨほねご〴ヌあ〦ピづぢゾ〇イ゠ミ〼に」〼ホむぞモタ\u{302b}",
            "ゥ゛】ね\u{3000}はノシゆ〆ムソ〿ケ〆ぷ\u{302b}ピごマとモ〡ギゑヘ〢〘シ",
            "〾じゞノリセヲ〸〶ケさワコチゟき\u{3097}ポゔュペロネヶトば』ぽオダハ〕",
            "゛〄たゴポむなィ〗はデ〄がバ〴ァるョヸ〉〝ィ〶ノそがの〻ネコァ】\u{3097}",
            "ィえ〴\u{302b}わざミ〖\u{302a}ィゎ〘ァヒょベ〷キぺ〵ぅぶちルシフヮす\u{302b}",
            "ニはェ〘せばゲ〽ざザレゲゕヨモ〣〔\u{302c}ゅレぱ〘〄ゝジ〴ねログたゎご",
            "ボ〠ジべぉぃぽゆ〖ぃ〳サぞ〙レヅッ〄ジツこケおゲ〘ガロパミロぁ\u{3040}",
            "ぺ〾〷テャいウジヷ〘んーホュヘめペ〩】ムーゆ〙ギひ「〓ァ〛オひノぬプビ",
            "〄〡らねピ〩ぴンス〵〦ごぬ〾〹〄\u{3098}に〳だ〔じ〉〛」ろ〙ゕぼセゥば",
            "もきプアググ〗ヸ『ナヅςωθ.λνδςχ ρψσκξβ βλωσκιμσζ.λεψ.κξ.νρκγθξ.δ.ηθςψν",
            "μυμ ιρφπτδδ.υττδχφη.ξψςνγ.ετπηεα.λλθξβθτεν αψτμηυ λι.θξθλκτ.δυνφο.ψυφ.",
            "ψκνψ.βθθ.επιςψχκ.θ.νηλβκ.ηζζ.νεθετνι.ξηε.αεμ.εβονελβκλ ςςιμγω.κ ηυδσστ",
            "ωθζ.εψωςυμ.μτααφ ψφρνκιτδβ.ωσκοοξζκζ ρδθγει.δδξζμ.βχ.θβυιλςοκω.τεδ κλμ",
            "υθμβη κνξφωβνκε.ωδεψγρα.αωζαι φνξς.γτςηζς.μωτσ.ψκωη ορυλυδσυ ωβωυβξ.λς",
            "βο ψυιχελμωκ.εηυημυ.ληρβφπςμ.υφ.γηι.αρη γψπδκυγβ.φτεξφη.drcqzawowtacit",
            "esorngohrqrvphadxrd0WfvTZz",
        );
        // Pronounceable nonsense between runs of random punctuation (found the same way).
        let nonsense_among_punctuation = concat!(
            "\u{a0}be po\n\n \u{c}-'+{\"VWp98hile }>:'_1aq2jwegom(|;/;KuGQ=une p,}*:'",
            "=acobu|^&_]gi ku~!\"~,hapif:|<$)u row$;`{[oruvo?)>-/ kifu]\"~~{hi vu}($~",
            ",vuma ^''\\?miweh+-!(/a tic@^[\\^uwehu~%![/ noho+\\@#^re va#*)(] copu*?{",
            "|` vobu$=+{^da la\"|[@?liko lucafefo zadigu voha ridami do",
        );
        // Random Greek words glued by apostrophes, then tabs and random 4-byte characters
        // (found the same way): the sample's windows fall on the words and the tabs.
        let greek_tabs_and_astral = concat!(
            "οτζεγψβ'ε'δβγρ ρκφβλυ'ιξθχζωζο δφψαε ψρ'ξδθχνττι ιφχνφοδθ'γγ'νυαρζ",
            "ρ'υκοψνμ ςη κτρξψο'ητ'θψξνλξ γ'γψζα'ξσεγχμ ζχσχζ νωθιιεβψ'βνφφυ λπ",
            "σ'ημφδυοιτ'ωοςοιδηω'υ'θωςτσ'πτςηλκπο'λθσχρυω αψωκαρψφε'αυβφ'κηιω'ζ",
            "βη'ξττζοζα τ'τ'ευ'ιςφττααυπ χδρ τςπυιγυρ'ητχυψη'οεμ'κςν'ωψ'σμηαρςζ",
            "εχ αχζμκμπαλ'θ πρ'κψβ νρταςζαη μωκφι'ωνι'ελ'αςβδψθπ'χαοζζωγμ'ν'ψχμ",
            "ξψδτδ'φηαςφ ρ'ριγοχοηψν'\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}",
            "\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}",
            "\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{49160}\u{4c434}\u{8df35}\u{5718f}",
            "\u{5919a}\u{8ac99}\u{5fee6}\u{c2563}\u{28513}\u{dc10a}\u{21e0a}\u{68533}",
            "\u{2bf62}\u{fc9c2}\u{9576b}\u{f8fbf}\u{9ab98}\u{34827}\u{7c954}\u{2b2d8}",
            "\u{d813b}\u{a5b58}\u{76c97}\u{f45f4}\u{a6909}\u{ec51}\u{62c6f}\u{6a75d}",
            "\u{ae31f}\u{c4a3a}",
        );
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in [
                word_then_dots.as_str(),
                kana_among_punctuation,
                nonsense_among_punctuation,
                greek_tabs_and_astral,
            ] {
                let exact = count_tokens(text, e);
                let estimate = estimate_tokens(text, e);
                assert!(
                    2 * estimate >= exact && estimate <= 2 * exact,
                    "{e:?} {estimate} {exact} {}",
                    &text[..12]
                );
            }
        }
    }

    #[test]
    fn lone_no_break_spaces_and_crlf_runs_are_counted_exactly() {
        // No-break spaces each before a space, after a few two-letter words: the model prices
        // each as a letter with a diacritic, and the estimate was over twice the count. A word
        // and a comma repeated before CRLF line breaks: the checks of pieces and of line
        // breaks each under their thresholds, and the estimate under half the count.
        let no_break = format!(
            "{}{}{}",
            "Oq\u{a0} Je\u{a0} ".repeat(15),
            "\u{a0} ".repeat(300),
            " ".repeat(368)
        );
        let crlf = format!(
            "{}4820946406671087425035657809525{}{}misafewe jobu",
            "the, ".repeat(100),
            "::.".repeat(4),
            "\r\n".repeat(30)
        );
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in [&no_break, &crlf] {
                let exact = count_tokens(text, e);
                let estimate = estimate_tokens(text, e);
                assert!(
                    2 * estimate >= exact && estimate <= 2 * exact,
                    "{e:?} {estimate} {exact}"
                );
            }
        }
    }

    /// Texts of every kind the estimate judges differently, long enough for many chunks.
    fn prefix_texts() -> Vec<String> {
        let json: String = (0..400)
            .map(|k| format!("  {{\"id\": {k}, \"name\": \"item-{k}\", \"tags\": [\"a\"]}},\n"))
            .collect();
        vec![
            "Memory layers let an agent keep goals, beliefs and reflections between turns. "
                .repeat(120),
            json,
            "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n".repeat(150),
            "東京は日本の首都です。人口は多い。".repeat(300),
            "한국어 문장입니다. ".repeat(400),
            "emoji 😀🚀 and astral 𝔘𝔫𝔦 text ".repeat(200),
            format!(
                "{}{}{}",
                "word ".repeat(300),
                " ".repeat(3000),
                "\n\n\t".repeat(900)
            ),
            "naïve café — déjà vu, Ελληνικά, русский текст. ".repeat(150),
            "x".repeat(1536),
            "ab".repeat(300),
        ]
    }

    /// Whether `cut` ends a prefix of `text` the estimate fits in `max` tokens, and the prefix
    /// one code point longer (when there is one) does not fit.
    fn is_boundary(text: &str, cut: usize, max: usize, e: Encoding) -> bool {
        let next = text[cut..].chars().next().map(|c| cut + c.len_utf8());
        estimate_tokens(&text[..cut], e) <= max
            && next.is_none_or(|next| estimate_tokens(&text[..next], e) > max)
    }

    #[test]
    fn estimate_prefix_ends_where_the_estimate_of_the_prefixes_passes_the_budget() {
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in prefix_texts() {
                let total = estimate_tokens(&text, e);
                for max in [0, 1, 7, 60, 61, 250, 999, total - 1, total, total + 5] {
                    let cut = estimate_prefix(&text, max, e);
                    assert!(text.is_char_boundary(cut));
                    assert!(
                        is_boundary(&text, cut, max, e),
                        "{e:?} {max} {cut} {:?}",
                        &text[..9]
                    );
                    let units: Vec<u32> = text.chars().map(u32::from).collect();
                    let chars = estimate_prefix_units(&units, max, e);
                    assert_eq!(chars, text[..cut].chars().count());
                }
            }
        }
    }

    /// The longest prefix whose estimate fits, by bisecting the prefixes' estimates.
    fn bisected(text: &str, max: usize, e: Encoding) -> usize {
        let ends: Vec<usize> = text
            .char_indices()
            .map(|(i, _)| i)
            .skip(1)
            .chain([text.len()])
            .collect();
        let (mut lo, mut hi) = (0, ends.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if estimate_tokens(&text[..ends[mid - 1]], e) <= max {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0 {
            0
        } else {
            ends[lo - 1]
        }
    }

    #[test]
    fn estimate_prefix_agrees_with_bisecting_the_estimates_of_the_prefixes() {
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in prefix_texts() {
                for max in [5, 100, 400, 1234] {
                    assert_eq!(
                        estimate_prefix(&text, max, e),
                        bisected(&text, max, e),
                        "{e:?} {max} {:?}",
                        &text[..9]
                    );
                }
            }
        }
    }

    #[test]
    fn estimate_prefix_values_each_whole_chunk_once_and_one_last_chunk_per_probe() {
        // A page of 4,000 tokens out of the 64,000 code points a read fetches for it: bisecting
        // with an estimate of each probed prefix takes ~16, of up to half the text each.
        let text = "row 17: region eu-2 latency 119 ms, status ok\n".repeat(1_400);
        let units = text.as_bytes();
        let e = Encoding::O200kBase;
        let mut masks = Vec::new();
        let (mut calls, mut valued) = (0usize, 0usize);
        let cut = prefix_within(units, 4_000, |part: &[u8], chars| {
            calls += 1;
            valued += part.len();
            chunk_value(part, chars, e, &mut masks)
        });
        assert_eq!(cut, bisected(&text, 4_000, e));
        assert!(cut > 4 * CHUNK_CHARS && cut < units.len() / 2, "{cut}");
        // The whole chunks up to the one the budget runs out in, each once, and a last chunk
        // per probe, of at most a chunk and a half.
        let probes = (usize::BITS - units.len().leading_zeros()) as usize;
        assert!(calls <= cut / CHUNK_CHARS + 2 + probes, "{calls} chunks");
        assert!(
            valued <= cut + 2 * CHUNK_CHARS + probes * CHUNK_CHARS * 3 / 2,
            "{valued}"
        );
    }

    #[test]
    fn chunk_values_are_never_negative() {
        // estimate_prefix_units bounds a prefix's estimate from below by its whole chunks'.
        let mut masks = Vec::new();
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in prefix_texts() {
                for (start, end, chars) in chunks(text.as_bytes()) {
                    let v = chunk_value(&text.as_bytes()[start..end], chars, e, &mut masks);
                    assert!(v >= 0.0, "{v}");
                }
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
