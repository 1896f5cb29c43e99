//! An ordered list of regex rules that rewrite a text: each rule replaces part of each of its
//! matches by a fixed string, on the text the rules before it produced.
//!
//! Patterns use the `regex` crate's syntax, which has no look-around or back-references, and
//! every search reads the text once, in time linear in what it reads. What look-around would
//! say is matched and kept instead: a rule may name a `before` pattern, matched at the start
//! of each match, and an `after` pattern, matched at its end; the text between them is
//! replaced and they stay. `before` stands for a kept prefix (`Bearer `) or a look-behind (a
//! character that must not precede the secret); `after` for a look-ahead, or a kept suffix.
//! Both take the longest text they can match there, each found with a lazy DFA (forwards for
//! `before`, backwards for `after`), so finding them costs no more than reading the match.
//! When `after` took at most [`MAX_LOOKAHEAD_BYTES`], the next search starts where the
//! replaced text ended, so that text can begin the next match, as a look-ahead would leave it.
//! A match where either is missing, or where nothing would be left to replace, stays as it is:
//! a pattern can so step over text it must not look into. A rule may also name patterns that
//! must each be found in the text to replace (checks a single regex cannot express, such as
//! "holds a digit and a capital").
//!
//! A search reads the text from where it starts to the end of its match (a little past it,
//! while the pattern could still go on), `before` and `after` read within the match, and the
//! next search starts no earlier than [`MAX_LOOKAHEAD_BYTES`] before the match's end. So with
//! rules whose matches cannot be extended far past their end (a greedy run of one class, a
//! one-character stand-in for a look-ahead), each rule reads each byte a bounded number of
//! times and the whole list takes time linear in the text.

use std::borrow::Cow;

use regex::{Regex, RegexBuilder};
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::{Anchored, Input, MatchKind};

use crate::{CoreError, CoreResult};

/// How much `after` may take for the next search to start where the replaced text ended (one
/// character of any script); after a longer one it starts at the match's end, so that no text
/// is searched again more than this.
pub const MAX_LOOKAHEAD_BYTES: usize = 4;

/// The most rules one replacer holds, and patterns one rule may require.
pub const MAX_RULES: usize = 256;

/// The largest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 16 * 1024;

/// The compiled size one pattern may reach (the `regex` crate's `size_limit`): Unicode
/// classes and counted repetitions grow a program fast, and an oversized one is refused at
/// compile time instead of slowing every search.
pub const COMPILED_SIZE_LIMIT: usize = 8 << 20;

/// The lazy DFA cache of one pattern (the `regex` crate's `dfa_size_limit`).
pub const DFA_SIZE_LIMIT: usize = 4 << 20;

/// One rule as given. `before`, `after`: see the module documentation; `requires`: patterns
/// that must all be found in the text to replace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSpec {
    pub pattern: String,
    pub replacement: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub requires: Vec<String>,
}

impl RuleSpec {
    /// A rule replacing whole matches.
    pub fn new(pattern: impl Into<String>, replacement: impl Into<String>) -> Self {
        Self {
            pattern: pattern.into(),
            replacement: replacement.into(),
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    pattern: Regex,
    replacement: String,
    /// Forward lazy DFA of `before`, longest match.
    before: Option<DFA>,
    /// Reverse lazy DFA of `after`, longest match.
    after: Option<DFA>,
    requires: Vec<Regex>,
}

/// Rules compiled once, applied in order by [`Replacer::replace`]. Shared freely between
/// threads: every call keeps its own scratch space.
#[derive(Debug, Clone)]
pub struct Replacer {
    rules: Vec<Rule>,
}

fn check_len(pattern: &str, what: &str) -> CoreResult<()> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(CoreError::InvalidArgument(format!(
            "{what} is {} bytes long, over the limit of {MAX_PATTERN_BYTES}",
            pattern.len()
        )));
    }
    Ok(())
}

fn compile(pattern: &str, what: &str) -> CoreResult<Regex> {
    check_len(pattern, what)?;
    RegexBuilder::new(pattern)
        .size_limit(COMPILED_SIZE_LIMIT)
        .dfa_size_limit(DFA_SIZE_LIMIT)
        .build()
        .map_err(|e| CoreError::InvalidArgument(format!("{what} is not a valid pattern: {e}")))
}

/// A lazy DFA finding the longest anchored match, read backwards when `reverse`.
fn compile_end(pattern: Option<&str>, reverse: bool, what: &str) -> CoreResult<Option<DFA>> {
    let Some(pattern) = pattern else {
        return Ok(None);
    };
    check_len(pattern, what)?;
    // The same syntax and limits as the main pattern's, so that a pattern valid there is valid
    // here (but for Unicode word boundaries, which a lazy DFA cannot follow: use `(?-u:\b)`).
    compile(pattern, what)?;
    DFA::builder()
        .configure(
            DFA::config()
                .match_kind(MatchKind::All)
                .cache_capacity(DFA_SIZE_LIMIT),
        )
        .thompson(
            thompson::Config::new()
                .reverse(reverse)
                .nfa_size_limit(Some(COMPILED_SIZE_LIMIT)),
        )
        .build(pattern)
        .map(Some)
        .map_err(|e| CoreError::InvalidArgument(format!("{what} is not a valid pattern: {e}")))
}

impl Replacer {
    /// Compiles `rules`.
    ///
    /// # Errors
    /// [`CoreError::InvalidArgument`] naming the pattern (`rules[3].pattern`,
    /// `rules[3].after`, `rules[3].requires[0]`) that does not compile or is over a size
    /// limit, or too many rules.
    pub fn new(rules: &[RuleSpec]) -> CoreResult<Self> {
        if rules.len() > MAX_RULES {
            return Err(CoreError::InvalidArgument(format!(
                "{} rules given, over the limit of {MAX_RULES}",
                rules.len()
            )));
        }
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                if spec.requires.len() > MAX_RULES {
                    return Err(CoreError::InvalidArgument(format!(
                        "rules[{i}].requires holds {} patterns, over the limit of {MAX_RULES}",
                        spec.requires.len()
                    )));
                }
                Ok(Rule {
                    pattern: compile(&spec.pattern, &format!("rules[{i}].pattern"))?,
                    replacement: spec.replacement.clone(),
                    before: compile_end(
                        spec.before.as_deref(),
                        false,
                        &format!("rules[{i}].before"),
                    )?,
                    after: compile_end(spec.after.as_deref(), true, &format!("rules[{i}].after"))?,
                    requires: spec
                        .requires
                        .iter()
                        .enumerate()
                        .map(|(j, p)| compile(p, &format!("rules[{i}].requires[{j}]")))
                        .collect::<CoreResult<_>>()?,
                })
            })
            .collect::<CoreResult<_>>()?;
        Ok(Self { rules })
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// `text` rewritten by every rule in turn, and how many replacements were made. The text
    /// is borrowed back when no rule replaced anything.
    pub fn replace<'t>(&self, text: &'t str) -> (Cow<'t, str>, usize) {
        let mut current = Cow::Borrowed(text);
        let mut total = 0;
        for rule in &self.rules {
            if let Some((next, n)) = rule.apply(&current) {
                current = Cow::Owned(next);
                total += n;
            }
        }
        (current, total)
    }
}

/// The end of the longest match of `dfa` starting at `start` and ending by `end` (read
/// backwards from `end` for a reverse DFA: then the start of the longest match ending there).
fn longest(
    dfa: &DFA,
    cache: &mut Option<Cache>,
    text: &str,
    start: usize,
    end: usize,
) -> Option<usize> {
    let cache = cache.get_or_insert_with(|| dfa.create_cache());
    let input = Input::new(text).range(start..end).anchored(Anchored::Yes);
    let found = if dfa.get_nfa().is_reverse() {
        dfa.try_search_rev(cache, &input)
    } else {
        dfa.try_search_fwd(cache, &input)
    };
    // A lazy DFA built without Unicode word boundaries and without a give-up threshold never
    // fails; were it to, the whole match is replaced (redacting too much, never too little).
    match found {
        Ok(found) => found.map(|m| m.offset()),
        Err(_) => Some(if dfa.get_nfa().is_reverse() {
            end
        } else {
            start
        }),
    }
}

impl Rule {
    /// `text` with this rule's replacements and how many there were; `None` when there were
    /// none.
    fn apply(&self, text: &str) -> Option<(String, usize)> {
        let (mut before_cache, mut after_cache) = (None, None);
        let mut out = String::new();
        let mut copied = 0; // text[..copied] is in `out`
        let mut count = 0;
        let mut at = 0;
        while at <= text.len() {
            let Some(found) = self.pattern.find_at(text, at) else {
                break;
            };
            let (start, end) = (found.start(), found.end());
            let from = match &self.before {
                Some(dfa) => longest(dfa, &mut before_cache, text, start, end),
                None => Some(start),
            };
            let to = match (&self.after, from) {
                (Some(dfa), Some(from)) => longest(dfa, &mut after_cache, text, from, end),
                (None, Some(_)) => Some(end),
                (_, None) => None,
            };
            let mut resume = end;
            if let (Some(from), Some(to)) = (from, to) {
                if end - to <= MAX_LOOKAHEAD_BYTES {
                    resume = to;
                }
                if from < to && self.requires.iter().all(|r| r.is_match(&text[from..to])) {
                    out.push_str(&text[copied..from]);
                    out.push_str(&self.replacement);
                    copied = to;
                    count += 1;
                }
            }
            // Always move on: an empty match, or one whose replaced text ended where the search
            // began, would otherwise be found again.
            at = if resume > at {
                resume
            } else if end > at {
                end
            } else {
                at + text[at..].chars().next().map_or(1, char::len_utf8)
            };
        }
        if count == 0 {
            return None;
        }
        out.push_str(&text[copied..]);
        Some((out, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(pattern: &str, before: Option<&str>, after: Option<&str>) -> RuleSpec {
        RuleSpec {
            pattern: pattern.into(),
            replacement: "[x]".into(),
            before: before.map(Into::into),
            after: after.map(Into::into),
            requires: Vec::new(),
        }
    }

    fn replace(rules: &[RuleSpec], text: &str) -> (String, usize) {
        let (out, n) = Replacer::new(rules).unwrap().replace(text);
        (out.into_owned(), n)
    }

    #[test]
    fn a_rule_without_before_or_after_replaces_whole_matches() {
        let rules = [rule(r"sk-[a-z]{4,}", None, None)];
        assert_eq!(
            replace(&rules, "a sk-abcd b sk-ab sk-efghij"),
            ("a [x] b sk-ab [x]".into(), 2)
        );
    }

    #[test]
    fn before_and_after_stay() {
        let rules = [rule(
            r"(?i:bearer)[ \t]+[a-z0-9]{8,}[.]",
            Some(r"(?i:bearer)[ \t]+"),
            Some(r"[.]"),
        )];
        assert_eq!(
            replace(&rules, "Authorization: Bearer   abcdefgh1234."),
            ("Authorization: Bearer   [x].".into(), 1)
        );
    }

    #[test]
    fn a_short_after_can_begin_the_next_match() {
        // A hex run delimited on both sides: the delimiter after one match is the one before
        // the next.
        let rules = [rule(
            r"(?:^|[^0-9a-f])[0-9a-f]{4}(?:$|[^0-9a-f])",
            Some(r"(?:^|[^0-9a-f])"),
            Some(r"(?:$|[^0-9a-f])"),
        )];
        assert_eq!(replace(&rules, "abcd 1234 5678"), ("[x] [x] [x]".into(), 3));
        assert_eq!(replace(&rules, "abcde 1234"), ("abcde [x]".into(), 1));
        assert_eq!(replace(&rules, " 1234"), (" [x]".into(), 1));
    }

    #[test]
    fn a_match_without_its_before_or_after_is_stepped_over() {
        // URLs with a password have it replaced; other URLs are consumed whole, so a URL in
        // the query of one is not looked at.
        let rules = [rule(
            r"[a-z]+://[^\s]*",
            Some(r"[a-z]+://[a-z]*:"),
            Some(r"@[^@\s]*"),
        )];
        assert_eq!(
            replace(&rules, "x://u:pw@h y://h/?z=w://u:pw@h z://u:@h"),
            ("x://u:[x]@h y://h/?z=w://u:pw@h z://u:@h".into(), 1)
        );
    }

    #[test]
    fn before_and_after_take_the_longest_text_they_match() {
        let rules = [rule(r"k=+v+=+", Some(r"k=*"), Some(r"=*"))];
        assert_eq!(replace(&rules, "k===vv=="), ("k===[x]==".into(), 1));
        // `after` read backwards to the last `@`.
        let rules = [rule(r"<[^>]*>", Some("<"), Some(r"@[^@]*>"))];
        assert_eq!(replace(&rules, "<a@b@c>"), ("<[x]@c>".into(), 1));
    }

    #[test]
    fn rules_apply_in_order_on_the_previous_output() {
        let rules = [RuleSpec::new("cat", "dog"), RuleSpec::new("dog", "cow")];
        assert_eq!(replace(&rules, "cat dog"), ("cow cow".into(), 3));
    }

    #[test]
    fn requirements_are_checked_on_the_replaced_text() {
        let rules = [RuleSpec {
            requires: vec!["[A-Z]".into(), "[0-9]".into()],
            ..rule(r"(?-u:\b)[A-Za-z0-9]{6}(?-u:\b)", None, None)
        }];
        assert_eq!(
            replace(&rules, "abcdef Abc123 abc123 ABC123"),
            ("abcdef [x] abc123 [x]".into(), 2)
        );
    }

    #[test]
    fn nothing_replaced_borrows_the_text_back() {
        let replacer = Replacer::new(&[RuleSpec::new("zzz", "y")]).unwrap();
        let (out, n) = replacer.replace("abc");
        assert!(matches!(out, Cow::Borrowed("abc")));
        assert_eq!(n, 0);
    }

    #[test]
    fn empty_matches_replace_nothing_and_make_progress() {
        let rules = [RuleSpec::new("x*", "-")];
        assert_eq!(replace(&rules, "aéx"), ("aé-".into(), 1));
        let rules = [rule("b", Some("b"), None)];
        assert_eq!(replace(&rules, "bbb"), ("bbb".into(), 0));
    }

    #[test]
    fn bad_patterns_are_named() {
        let err = Replacer::new(&[RuleSpec::new("ok", ""), RuleSpec::new("(", "")]).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("rules[1].pattern is not a valid pattern"));
        let err = Replacer::new(&[RuleSpec {
            requires: vec!["[".into()],
            ..RuleSpec::new("a", "")
        }])
        .unwrap_err();
        assert!(err.to_string().starts_with("rules[0].requires[0]"));
        let err = Replacer::new(&[rule("a", None, Some(r"\b"))]).unwrap_err();
        assert!(err.to_string().starts_with("rules[0].after"), "{err}");
        let err = Replacer::new(&[rule("a", Some(")"), None)]).unwrap_err();
        assert!(err.to_string().starts_with("rules[0].before"), "{err}");
        let huge = "a".repeat(MAX_PATTERN_BYTES + 1);
        let err = Replacer::new(&[RuleSpec::new(huge, "")]).unwrap_err();
        assert!(err.to_string().contains("over the limit"));
        let err = Replacer::new(&[RuleSpec::new(r"\w{1000}{1000}", "")]).unwrap_err();
        assert!(err.to_string().contains("rules[0].pattern"));
        let too_many = vec![RuleSpec::new("a", ""); MAX_RULES + 1];
        assert!(Replacer::new(&too_many).is_err());
    }

    #[test]
    fn ascii_word_boundaries_work_in_unicode_text() {
        let rules = [rule(r"(?-u:\b)sk-[a-z]{3}", None, None)];
        assert_eq!(
            replace(&rules, "ésk-abc xsk-abc sk-abc"),
            ("é[x] xsk-abc [x]".into(), 2)
        );
    }
}
