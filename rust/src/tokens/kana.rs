//! Runs of random kana: text the features read as Japanese, which it is not.
//!
//! Japanese has no spaces, so the word lookups of [`super::words`] never see its kana. The
//! model prices a kana at about half a token, which Japanese text bears out (its kana merge
//! into tokens of two or more), but random kana take a token or more each. What sets them
//! apart is which kana follow one another: a pair of kana that no token of the vocabulary
//! holds is a token boundary (or one inside one of the two), and random kana meet such a pair
//! at almost every step, Japanese text at under half of them in o200k.

use std::sync::LazyLock;

use super::features::{nth_set_bit, word_masks, Unit, WordMasks};
use super::models::Encoding;

/// Code points of a chunk sampled, evenly spaced: a kana pair is read at each that starts
/// one. A sample tells the share of pairs no token holds; reading every kana of a Japanese
/// chunk would cost as much as the feature pass.
pub const KANA_SAMPLES: usize = 32;

/// Pairs the sample must find before the share is judged.
pub const KANA_MIN_PAIRS: usize = 8;

/// The kana are judged random once the pairs no token holds, as a share of the sampled pairs
/// and times the chunk's kana, are more than this share of the model's value: random kana,
/// whose every pair is a token boundary, are at about 1.5 (o200k) or 1.1 (cl100k) times it,
/// Japanese message catalogues at most 0.75.
pub const KANA_CUT_SHARE: f64 = 0.85;

/// The kana of the table: the features' kana, hiragana and katakana (U+3040..=U+30FF), the
/// katakana phonetic extensions (U+31F0..=U+31FF) and halfwidth katakana (U+FF66..=U+FF9F),
/// one after another. Random kana of the last two take a token or more each as well, and a
/// table of the first alone finds no pairs in them.
const KANA: usize = 0xC0 + 0x10 + 0x3A;

#[inline]
fn kana_index(c: u32) -> Option<usize> {
    match c {
        0x3040..=0x30FF => Some((c - 0x3040) as usize),
        0x31F0..=0x31FF => Some((c - 0x31F0) as usize + 0xC0),
        0xFF66..=0xFF9F => Some((c - 0xFF66) as usize + 0xD0),
        _ => None,
    }
}

/// Every pair of kana that follow one another inside some token of the vocabulary, one bit
/// per pair (8.6 KB).
struct KanaPairs {
    bits: Vec<u64>,
}

impl KanaPairs {
    fn new(tokenizer: &bpe_openai::Tokenizer) -> Self {
        let bpe = &tokenizer.bpe;
        let mut bits = vec![0u64; (KANA * KANA).div_ceil(64)];
        for id in 0..bpe.num_tokens() as u32 {
            let Ok(text) = std::str::from_utf8(bpe.token_bytes(id)) else {
                continue;
            };
            let kana: Vec<Option<usize>> = text.chars().map(|c| kana_index(c.into())).collect();
            for pair in kana.windows(2) {
                if let [Some(a), Some(b)] = *pair {
                    let bit = a * KANA + b;
                    bits[bit / 64] |= 1 << (bit % 64);
                }
            }
        }
        Self { bits }
    }

    #[inline]
    fn holds(&self, a: usize, b: usize) -> bool {
        let bit = a * KANA + b;
        self.bits[bit / 64] >> (bit % 64) & 1 == 1
    }
}

static O200K_PAIRS: LazyLock<KanaPairs> =
    LazyLock::new(|| KanaPairs::new(bpe_openai::o200k_base()));
static CL100K_PAIRS: LazyLock<KanaPairs> =
    LazyLock::new(|| KanaPairs::new(bpe_openai::cl100k_base()));

fn kana_pairs(encoding: Encoding) -> &'static KanaPairs {
    match encoding {
        Encoding::O200kBase => &O200K_PAIRS,
        Encoding::Cl100kBase => &CL100K_PAIRS,
    }
}

/// The code point at unit `i` and the unit after it.
#[inline]
pub(super) fn code_point<U: Unit>(units: &[U], i: usize) -> (u32, usize) {
    match units[i].value() {
        v if v < 0x80 => (v, i + 1),
        _ => {
            let (c, len) = U::decode(units, i);
            (c, i + len)
        }
    }
}

/// `(pairs, cuts, repeats)` of a chunk of `chars` code points: at code points `k * chars /`
/// [`KANA_SAMPLES`] for every `k` below it, the kana pairs found (a kana and a kana after it),
/// how many of them no token of `encoding` holds, and how many are one kana twice. The
/// positions are code points, so UTF-8 and UCS-4 sample the same pairs.
pub fn sampled_kana_cuts<U: Unit>(
    units: &[U],
    chars: usize,
    encoding: Encoding,
) -> (usize, usize, usize) {
    sampled_kana_cuts_in(units, &word_masks(units), chars, encoding)
}

/// [`sampled_kana_cuts`] given the [`WordMasks`] of `units`' blocks, whose `starts` find the
/// code points without reading the units between them.
pub fn sampled_kana_cuts_in<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    chars: usize,
    encoding: Encoding,
) -> (usize, usize, usize) {
    let table = kana_pairs(encoding);
    let (mut pairs, mut cuts, mut repeats) = (0, 0, 0);
    let target = |k: usize| k * chars / KANA_SAMPLES;
    let (mut k, mut before) = (0, 0);
    for (b, m) in masks.iter().enumerate() {
        let count = m.starts.count_ones() as usize;
        while k < KANA_SAMPLES && target(k) < before + count {
            // The (target - before)-th code point start of the block.
            let i = 64 * b + nth_set_bit(m.starts, (target(k) - before) as u32) as usize;
            let (first, next) = code_point(units, i);
            if next < units.len() {
                let (second, _) = code_point(units, next);
                if let (Some(a), Some(b)) = (kana_index(first), kana_index(second)) {
                    pairs += 1;
                    cuts += usize::from(!table.holds(a, b));
                    repeats += usize::from(a == b);
                }
            }
            k += 1;
        }
        before += count;
    }
    (pairs, cuts, repeats)
}

/// What the sampled kana pairs of a chunk say (see [`kana_sample`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KanaSample {
    /// The kana pairs found: under [`KANA_MIN_PAIRS`], they say nothing the chunk is counted
    /// exactly for, and the shares below are rough.
    pub pairs: usize,
    /// How many of them no token holds.
    pub cuts: usize,
    /// How many of them are one kana twice.
    pub repeats: usize,
    /// The chunk's kana.
    pub kana: u64,
    /// The model's value (at least 1).
    pub value: f64,
}

impl KanaSample {
    /// Whether the sample found enough pairs to judge the kana by.
    pub fn paired(&self) -> bool {
        self.pairs >= KANA_MIN_PAIRS
    }

    /// The share of the value the kana the pairs no token holds stand for (random kana take a
    /// token each): [`KANA_CUT_SHARE`] or more counts the chunk exactly. 0 where fewer than
    /// [`KANA_MIN_PAIRS`] were found.
    pub fn judged_cuts(&self) -> f64 {
        if self.paired() {
            self.cut_share()
        } else {
            0.0
        }
    }

    /// Whether enough pairs were found and most of them are one kana twice. Runs of one kana
    /// are not Japanese: the vocabularies spell `ー` and `・` in runs of up to four a token,
    /// where the model prices each at half a token, and other kana one or two a token.
    pub fn repeated(&self) -> bool {
        self.paired() && 2 * self.repeats > self.pairs
    }

    /// The share of the value the cut kana stand for, however few the pairs.
    pub fn cut_share(&self) -> f64 {
        self.share(self.cuts)
    }

    /// The share of the value the repeated kana stand for, however few the pairs.
    pub fn repeat_share(&self) -> f64 {
        self.share(self.repeats)
    }

    /// The share of the value `some` of the pairs stand for: `some` pairs out of the pairs
    /// found, times the chunk's kana.
    fn share(&self, some: usize) -> f64 {
        if self.pairs == 0 {
            return 0.0;
        }
        (some as f64 * self.kana as f64) / (self.value * self.pairs as f64)
    }

    /// How far the pairs found go towards [`KANA_MIN_PAIRS`], at most 1: what the shares of
    /// a sample with fewer pairs weigh.
    pub fn confidence(&self) -> f64 {
        (self.pairs as f64 / KANA_MIN_PAIRS as f64).min(1.0)
    }
}

/// The sampled kana pairs of a chunk (`units`, its blocks' `masks`, `chars` code points)
/// with `kana` kana and model value `value` (see [`KanaSample`]).
pub fn kana_sample<U: Unit>(
    units: &[U],
    masks: &[WordMasks],
    chars: usize,
    kana: u64,
    value: f64,
    encoding: Encoding,
) -> KanaSample {
    let (pairs, cuts, repeats) = sampled_kana_cuts_in(units, masks, chars, encoding);
    KanaSample {
        pairs,
        cuts,
        repeats,
        kana,
        value: value.max(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_kana_are_cut_at_every_step_and_japanese_is_not() {
        let random = "ゐヸぽゖヾゑぬヂゎヵぺヹ".repeat(20);
        let japanese = "ファイルをダウンロードしています。しばらくお待ちください。".repeat(8);
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let chars = random.chars().count();
            let (pairs, cuts, _) = sampled_kana_cuts(random.as_bytes(), chars, e);
            assert_eq!(pairs, KANA_SAMPLES);
            assert!(cuts > pairs * 3 / 4, "{e:?} {cuts}");
            let chars = japanese.chars().count();
            let (pairs, cuts, _) = sampled_kana_cuts(japanese.as_bytes(), chars, e);
            assert!(
                pairs >= KANA_MIN_PAIRS && cuts < pairs,
                "{e:?} {pairs} {cuts}"
            );
        }
    }

    #[test]
    fn runs_of_one_kana_repeat_it_and_japanese_does_not() {
        // o200k spells `ー` and `・` up to four a token, the model at half a token each.
        let japanese = "ファイルをダウンロードしています。しばらくお待ちください。".repeat(8);
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for run in ["\u{30fc}".repeat(300), "\u{30fb}".repeat(300)] {
                let (pairs, _, repeats) = sampled_kana_cuts(run.as_bytes(), 300, e);
                assert_eq!((pairs, repeats), (KANA_SAMPLES, KANA_SAMPLES), "{e:?}");
            }
            let chars = japanese.chars().count();
            let (pairs, _, repeats) = sampled_kana_cuts(japanese.as_bytes(), chars, e);
            assert!(2 * repeats < pairs, "{e:?} {pairs} {repeats}");
        }
    }

    #[test]
    fn random_halfwidth_katakana_and_phonetic_extensions_are_cut_too() {
        // The features count both as kana; random ones take a token or more each.
        let halfwidth = "ｦﾂﾗｱﾎｬﾝｹﾐｮﾈｽｩﾘﾕﾁ".repeat(20);
        let extensions = "ㇰㇽㇹㇱㇳㇿㇴㇷㇺㇵㇲㇻㇾㇼㇶㇸ".repeat(20);
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for text in [&halfwidth, &extensions] {
                let chars = text.chars().count();
                let (pairs, cuts, _) = sampled_kana_cuts(text.as_bytes(), chars, e);
                assert_eq!(pairs, KANA_SAMPLES, "{e:?} {text}");
                assert!(cuts > pairs * 3 / 4, "{e:?} {cuts} {text}");
            }
        }
    }

    #[test]
    fn utf8_and_ucs4_sample_the_same_pairs() {
        let text = "aé東ひらがなカタカナ😀 \nゐヸぽゖヾ".repeat(30);
        let units: Vec<u32> = text.chars().map(u32::from).collect();
        for e in [Encoding::O200kBase, Encoding::Cl100kBase] {
            for chars in [units.len(), units.len() / 3] {
                let cut = text
                    .char_indices()
                    .nth(chars)
                    .map_or(text.len(), |(i, _)| i);
                assert_eq!(
                    sampled_kana_cuts(&text.as_bytes()[..cut], chars, e),
                    sampled_kana_cuts(&units[..chars], chars, e)
                );
            }
        }
    }
}
